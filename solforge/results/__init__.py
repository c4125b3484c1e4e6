"""Results of a store, for people: the results table over every problem, and saved best kernels."""
