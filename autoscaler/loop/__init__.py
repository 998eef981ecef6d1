"""The control loop, one module per stage: observe, estimate, decide, guard, actuate, export."""
