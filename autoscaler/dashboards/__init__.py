"""The Grafana dashboard bundle and the Prometheus rules (``autoscaler dashboards export``).

``boards.py`` builds the dashboards with grafana-foundation-sdk (``panels.py`` has the shared
builders), ``rules.py`` the recording and alerting rules, ``bundle.py`` renders and writes them.
docs/dashboards.md lists every panel and alert.
"""
