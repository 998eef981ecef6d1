"""I/O adapters behind the loop's interfaces (simulator now; Prometheus and Kubernetes later)."""
