"""Attention over packed rows: which tokens a query sees (documents kept apart, a shared prompt seen by both of its
answers) and the kernels that compute it on CPU and GPU."""
