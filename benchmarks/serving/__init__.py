"""Serving benchmarks: the Ray actor service, Ray Serve, the HTTP shell, and their stress sections."""
