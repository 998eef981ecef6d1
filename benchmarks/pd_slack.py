"""How far past its planned rate each replica of a mixed (aggregated + prefill/decode) fleet can go in
a burst, by the capacity models: the figures behind issue 34's seed-2 shortfall (docs/controllers.md,
"Reruns at e4b258b, and where the pools' misses come from").

For every aggregated variant: its capacity at the interactive SLO (``variant_weights``, what the MPC
plans it at) and its fluid limit ``1 / W`` (``models.capacity.utilisation`` at 1 req/s is ``W``: the
rate at which its steps grow without bound). For every prefill variant: its modelled capacity
(``controllers.roles.pool_capacities``, before ``mpc:pd_util``) and its saturation rate, one over the
mean busy seconds a request of the mix brings it (its prefill work plus its tokens' share of the fixed
step time when steps are full: the busy replica's service in ``models.capacity_roles.prefill_capacity``,
over the remotely prefilled points, ``remote_points``). The ratio limit / capacity is how many times its
planned rate a replica absorbs before its queue grows; a prefill replica planned at ``pd_util`` of its
capacity absorbs ``ratio / pd_util``.

    PYTHONPATH=$PWD python benchmarks/pd_slack.py --trace ../shared/data/azure-llm-2023/AzureLLMInferenceTrace_code.csv
        [--config examples/fleet-mixed-pd.yaml] [--span 0:1800]

The mix is the trace's requests in the span that fit the service's ``max_model_len`` (as the
simulator admits them). Prints one line per variant: role, name, capacity, limit, ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from autoscaler.config.loading import load_config
from autoscaler.workload.azure import load_azure
from autoscaler.workload.build import crop, parse_span
from controllers.roles import pool_capacities
from models.capacity import ReplicaSpec, RequestMix, marginal_costs, utilisation, variant_weights
from models.capacity_roles import remote_points

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="Azure 2023 CSV")
    ap.add_argument("--config", default="examples/fleet-mixed-pd.yaml",
                    help="fleet file whose first service has prefill/decode roles")
    ap.add_argument("--span", default="0:1800", help="START:END seconds of the trace for the mix")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    svc, engine = cfg.services[0], cfg.planning_engine()
    if svc.roles is None:
        print(f"{args.config}: service {svc.name} has no prefill/decode roles", file=sys.stderr)
        return 2
    wl = crop(load_azure(args.trace), *parse_span(args.span))
    kept = [r for r in wl.requests if r.input_tokens + r.output_tokens <= svc.max_model_len]
    mix = RequestMix.from_requests(np.array([r.input_tokens for r in kept], dtype=float),
                                   np.array([r.output_tokens for r in kept], dtype=float))
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    planned = variant_weights(svc, engine, mix)
    for v in svc.variants:
        spec = ReplicaSpec.of(v, engine)
        fluid = 1.0 / utilisation(spec, mix, 1.0)
        cap = planned[v.name]
        print(f"aggregated {v.name}: capacity {cap:.2f} req/s, fluid limit {fluid:.2f}, "
              f"ratio {fluid / cap if cap > 0 else float('inf'):.2f}")
    pools = pool_capacities(svc, engine, mix)
    remote = remote_points(mix, svc.roles.remote_threshold)
    for v in svc.roles.prefill:
        spec = ReplicaSpec.of(v, engine)
        t0, a, _, _ = marginal_costs(spec.profile)
        q = spec.profile.prefill_equivalent(mix.uncached, mix.input_tokens - mix.uncached)
        # a busy replica's steps are full: each prompt pays its work and its tokens' share of t0
        busy_s = float(mix.weights @ (remote * (a * q + t0 * mix.uncached / spec.max_num_batched_tokens)))
        sat = 1.0 / busy_s if busy_s > 0 else float("inf")
        cap = pools[v.name]
        print(f"prefill {v.name}: capacity {cap:.2f} req/s, saturation {sat:.2f}, "
              f"ratio {sat / cap if cap > 0 else float('inf'):.2f}")
    for v in svc.roles.decode:
        print(f"decode {v.name}: capacity {pools[v.name]:.2f} req/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
