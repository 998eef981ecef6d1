"""The anchors' autoscalers, re-implemented with their own rules and constants.

The rules and constants each takes, with their sources: ``docs/anchors.md#baselines-re-implemented``.

Each baseline is a ``controllers.base.Controller`` that runs in the same ``ControlLoop`` as the PID,
against the simulator or a live Prometheus. It keeps its own state (windows, stabilisation history,
panic mode), declares its own period ``tick_s`` (and ``window_s`` when its anchor fixes one), and
brings its own guard (``own_guard``): the loop then applies only the variants' min/max bounds, so it
is measured with its own rules, not ours.

Modules: ``hpa``, ``keda``, ``knative`` (KPA), ``aibrix`` (KPA and APA), ``dynamo`` (throughput
planner, with ``predictors``; ``dynamo_pd`` its disaggregated mode), ``wva`` (llm-d), ``static_ilp``
(Mélange-style fixed mix);
``common`` (count placement, sample windows) and ``calibrate`` (default metric targets). Build them
by spec with ``controllers.registry``.
"""
