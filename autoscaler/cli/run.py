"""``autoscaler run``: the daemon on a Kubernetes cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autoscaler.cli.common import app, examples, fail, load_cfg
from autoscaler.cli.options import LiveControllerOpt, PrometheusUrlOpt, check_live_controller
from autoscaler.errors import AutoscalerError


@app.command("run", epilog=examples(
    "autoscaler run --config fleet.yaml --dry-run",
    "autoscaler run --config fleet.yaml --controller mpc --prometheus-url http://prometheus:9090",
    "autoscaler run --config fleet.yaml --kubeconfig ~/.kube/config --log-format json",
))
def run_daemon(
    config: Annotated[Path, typer.Option(help="Fleet YAML file.")],
    controller: LiveControllerOpt = "pid",
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Kubeconfig file (default: the pod's service account in a cluster, else $KUBECONFIG or "
             "~/.kube/config).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Do everything but the writes; log them.")] = False,
    port: Annotated[int, typer.Option(help="Port of /metrics, /healthz, /readyz and /v1/admission.")] = 8080,
    admission_port: Annotated[int | None, typer.Option(
        help="Serve /v1/admission on this port alone, not on --port (gateways apart from scrapers).")] = None,
    host: Annotated[str, typer.Option(
        help="Address to listen on (all interfaces: a pod's probes and scrapers reach it on the pod IP).")
    ] = "0.0.0.0",
    prometheus_url: PrometheusUrlOpt = None,
    identity: Annotated[str | None, typer.Option(
        help="This daemon's name in the Lease and its Events: 1 to 128 visible ASCII characters (default: "
             "$POD_NAME, else HOST-PID).")] = None,
    log_format: Annotated[str, typer.Option(help="Log format: text | json (one JSON object per line).")] = "text",
) -> None:
    """Run the control loop on a cluster (docs/daemon.md).

    Leader election, scale subresource writes, admission ConfigMaps, Events. SIGTERM finishes the
    tick (kubernetes.stop_grace_s at most) and releases the lease."""
    import logging
    import os
    import signal
    import socket
    import sys

    from autoscaler.adapters.kubernetes import check_workloads
    from autoscaler.adapters.kubernetes import connect as kube_connect
    from autoscaler.adapters.prometheus import PrometheusError
    from autoscaler.adapters.prometheus import connect as prom_connect
    from autoscaler.config.kubernetes import check_identity
    from autoscaler.daemon import Daemon
    from autoscaler.logs import formatter
    from autoscaler.wiring import build_source
    from controllers.registry import build

    ports = f"--port {port}" + ("" if admission_port is None else f" or --admission-port {admission_port}")
    try:
        check_live_controller(controller, "run")
        cfg = load_cfg(config)
        check_workloads(cfg.kubernetes, cfg.services)  # before connecting: a bad kind is the file's error
        if log_format not in ("text", "json"):
            raise ValueError(f"--log-format must be text or json, got '{log_format}'")
        if not 0 <= port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {port}")
        if admission_port is not None and not 0 <= admission_port <= 65535:
            raise ValueError(f"--admission-port must be in 0..65535, got {admission_port}")
        if admission_port is not None and admission_port == port != 0:
            raise ValueError(f"--admission-port must differ from --port ({port})")
        name = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        check_identity(name, "--identity" if identity else "$POD_NAME" if os.environ.get("POD_NAME") else "HOST-PID")
        url = prometheus_url or cfg.prometheus.url
        if not url:
            raise ValueError("no Prometheus URL: pass --prometheus-url or set prometheus.url in the fleet file")
        # rates over the controller's own window (the MPC's 60 s, not controller.window_s's 300), as dry-run reads
        source = build_source(cfg, prom_connect(cfg.prometheus, url), window_s=build(controller, cfg).window_s)
        api = kube_connect(kubeconfig, timeout_s=cfg.kubernetes.lease.renew_s / 2)  # a call ends within a lease
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter(log_format))
        root = logging.getLogger("autoscaler")
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        daemon = Daemon(cfg, controller, source, api, name, f"{host}:{port}", dry_run=dry_run,
                        admission_address=None if admission_port is None else f"{host}:{admission_port}")
    except (AutoscalerError, PrometheusError, ValueError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"--host {host} {ports}: {exc.strerror or exc}") from None
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop("SIGTERM"))
    extra = "" if daemon.admission_server is None else f", /v1/admission on port {daemon.admission_server.port}"
    logging.getLogger("autoscaler.daemon").info("%s serving on %s:%d (%s%s%s)", name, host, daemon.server.port,
                                                controller, ", dry run" if dry_run else "", extra)
    try:
        daemon.run()
    except KeyboardInterrupt:
        daemon.stop()
    logging.getLogger("autoscaler.daemon").info("%s stopped", name)
    if daemon.abandoned:  # a tick hung in a call: its threads would hold the exit past the pod's grace
        logging.shutdown()
        sys.stderr.flush()
        os._exit(0)
