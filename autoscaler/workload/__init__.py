"""Request workloads: trace loaders, rate shaping and the embedded synthetic default."""
