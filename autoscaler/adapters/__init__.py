"""I/O adapters behind the loop's interfaces: the simulator, Prometheus, Kubernetes (scale subresource,
Lease, ConfigMaps, Events) and the Gateway API Inference Extension."""
