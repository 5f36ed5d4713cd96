"""The local lab: real PostgreSQL and Slurm services for tests, benchmarks and the demo."""
