"""KB benchmarks: build cost and stage times, OpenIE filtering, and KB-write reliability."""
