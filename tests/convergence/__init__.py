"""The convergence harness: adversarial schema and workload, kills, all-tables commands; see README."""
