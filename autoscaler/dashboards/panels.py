"""Builders shared by the dashboards: the datasource, template variables, selectors, the recorded
series a panel reads, time-series panels (grafana-foundation-sdk), and the record of every query a
dashboard holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.models import common as mc
from grafana_foundation_sdk.models import dashboard as md

from autoscaler.promql import RECORDING_RULES, recorded_name

DATASOURCE = md.DataSourceRef(type_val="prometheus", uid="${datasource}")
"""Every panel reads the dashboard's ``datasource`` variable (a Prometheus)."""

# Selectors of the template variables. vLLM's series carry model_name (and, as the shipped scrape
# configs and the simulator label them, namespace, pod and variant); the loop's carry service.
LOOP = 'service=~"$service"'
LOOP_VARIANT = 'service=~"$service",variant=~"$variant"'
PODS = 'namespace=~"$namespace",model_name=~"$model",variant=~"$variant"'
GATEWAY = 'model_name=~"$model"'
RATE = "$__rate_interval"

HEIGHT, WIDTH = 8, 12


def recorded(series: str, matchers: str, by: str = "") -> str:
    """``sum [by (by)] (<recording rule of series>{matchers})``: the 5-minute rate of a counter or
    histogram series as the recording rules (``autoscaler.promql.RECORDING_RULES``) hold it, so a
    panel reads the one definition the loop's ``recorded`` query set and the rules share (kube-prometheus's
    mixins chart their recorded series the same way).

    Raises:
        KeyError: no recording rule records ``series`` (at import: a panel that would rate it itself).
    """
    name = recorded_name(series)
    if name not in RECORDING_RULES:
        raise KeyError(f"{series}: no recording rule records its rate (autoscaler.promql._RATED)")
    agg = f"sum by ({by})" if by else "sum"
    return f"{agg} ({name}{{{matchers}}})"


def first_recorded(counters: tuple[str, ...], matchers: str, by: str = "") -> str:
    """``recorded`` of the first of ``counters`` the rules have series of (``or``, as
    ``autoscaler.promql.first_present``: two names counting the same requests are never added)."""
    return "(" + " or ".join(recorded(c, matchers, by) for c in counters) + ")"


@dataclass
class Board:
    """A dashboard being built: its builder and the PromQL of every panel target and annotation
    (``(panel title, expression)``), which the bundle's test runs against a real Prometheus."""

    builder: dashboard.Dashboard
    queries: list[tuple[str, str]] = field(default_factory=list)
    _slot: int = 0

    def add(self, panel: timeseries.Panel, title: str, targets: list[tuple[str, str]], width: int = WIDTH) -> None:
        """Add ``panel`` (titled ``title``) with its ``(expression, legend)`` targets, laid out two per row."""
        x = (self._slot % 2) * WIDTH
        y = (self._slot // 2) * HEIGHT
        self._slot += 2 if width > WIDTH else 1
        panel.title(title).datasource(DATASOURCE).grid_pos(md.GridPos(h=HEIGHT, w=width, x=x, y=y))
        for i, (expr, legend) in enumerate(targets):
            panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i)))
            self.queries.append((title, expr))
        self.builder.with_panel(panel)

    def annotate(self, name: str, expr: str, text: str) -> None:
        """An annotation drawn wherever ``expr`` has a value (e.g. a scale decision)."""
        self.builder.annotation(dashboard.AnnotationQuery().name(name).datasource(DATASOURCE).expr(expr)
                                .enable(True).icon_color("orange").type("tags"))
        self.queries.append((f"annotation: {name} ({text})", expr))


def new_board(uid: str, title: str, description: str, tags: list[str]) -> Board:
    """A dashboard with the product's variables: ``datasource`` (any Prometheus), ``namespace``,
    ``service`` (the loop's services), ``model`` (vLLM's model_name) and ``variant``, each multi-select
    with All; the last 3 hours, refreshed every 30 s."""
    b = (dashboard.Dashboard(title).uid(uid).description(description).tags(tags).editable()
         .time("now-3h", "now").refresh("30s").timezone("browser"))
    b.with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    for name, label, query in (
        ("namespace", "Namespace", "label_values(vllm:num_requests_running, namespace)"),
        ("service", "Service", "label_values(autoscaler_current_replicas, service)"),
        ("model", "Model", 'label_values(vllm:num_requests_running{namespace=~"$namespace"}, model_name)'),
        # the aggregated variants' and the prefill/decode pools' (``autoscaler_pool_current_replicas``)
        ("variant", "Variant", 'label_values({__name__=~"autoscaler_current_replicas|autoscaler_pool_current_replicas",'
                               'service=~"$service"}, variant)'),
    ):
        b.with_variable(dashboard.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
                        .refresh(md.VariableRefresh.ON_TIME_RANGE_CHANGED).multi(True).include_all(True)
                        .all_value(".*").current(md.VariableOption(selected=True, text="All", value="$__all")))
    return Board(b)


def series(unit: str, description: str, *, stack: bool = False, lines: list[tuple[float, str]] | None = None,
           minimum: float | None = None, maximum: float | None = None) -> timeseries.Panel:
    """A time-series panel in ``unit`` (a Grafana unit id: ``s``, ``reqps``, ``percentunit``...);
    ``stack`` stacks its series; ``lines`` draws a dashed threshold line at each ``(value, color)``;
    ``minimum`` and ``maximum`` bound the axis."""
    p = timeseries.Panel().unit(unit).description(description).line_width(1).fill_opacity(10 if stack else 0)
    p.legend(common.VizLegendOptions().show_legend(True).display_mode(mc.LegendDisplayMode.LIST)
             .placement(mc.LegendPlacement.BOTTOM))
    if minimum is not None:
        p.min(minimum)
    if maximum is not None:
        p.max(maximum)
    if stack:
        p.stacking(common.StackingConfig().mode(mc.StackingMode.NORMAL))
    if lines:
        steps = [md.Threshold(value=None, color="transparent")] + [md.Threshold(value=v, color=c) for v, c in lines]
        p.thresholds(dashboard.ThresholdsConfig().mode(md.ThresholdsMode.ABSOLUTE).steps(steps))
        p.thresholds_style(common.GraphThresholdsStyleConfig().mode(mc.GraphTresholdsStyleMode.DASHED))
    return p


def unstacked(panel: timeseries.Panel, *ref_ids: str) -> timeseries.Panel:
    """Draw the targets ``ref_ids`` of a stacked panel as plain lines over the stack."""
    for ref in ref_ids:
        panel.override_by_query(ref, [md.DynamicConfigValue(id_val="custom.stacking",
                                                            value={"mode": "none", "group": ref}),
                                      md.DynamicConfigValue(id_val="custom.fillOpacity", value=0)])
    return panel


def right_axis(panel: timeseries.Panel, ref_id: str, unit: str) -> timeseries.Panel:
    """Draw the target ``ref_id`` on a second axis, on the right, in its own ``unit`` (a panel whose
    series are in two units: replicas and requests/s)."""
    return panel.override_by_query(ref_id, [md.DynamicConfigValue(id_val="unit", value=unit),
                                            md.DynamicConfigValue(id_val="custom.axisPlacement", value="right")])
