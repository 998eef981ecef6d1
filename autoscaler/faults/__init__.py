"""The fault suite: the failures the anchors' users reported, as scenarios run against every
controller (``autoscaler faults run``; docs/faults.md).

``scenario`` reads a scenario file, ``inject`` puts its simulator-layer faults into a simulation,
``live`` runs the Prometheus- and Kubernetes-layer ones through a real Prometheus and the emulated
API server, ``harm`` counts harmful actions, ``suite`` runs scenario x controller and tabulates.
"""
