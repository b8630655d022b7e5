"""GPU memory as torch reports it (`torch.cuda.get_device_properties(i).total_memory`, in GiB) for a GPU as sold.

Why: a GPU sold as "80 GB" is not 80e9 bytes to the allocator (74.5 GiB) but about 79.2 GiB, and an H200
("141 GB") 139.7 GiB, not 131.3. Preflight's `--this-machine` reads the real figure from torch; a figure
given by hand (`--gpu-memory-gb 80`) must mean the same thing, or the two disagree by 6%.
"""

# Sold size (GB) -> total_memory as torch reports it (GiB), and where each figure comes from.
TORCH_GIB = {
    80.0: 79.2,  # A100 80GB / H100 80GB: about 79.2 GiB (85.0e9 bytes) as torch reports them
    141.0: 139.7,  # H200: measured with torch on this project's H200 machine (143,771 MiB by nvidia-smi)
}
# Other GPUs: torch reports about 0.99 of the sold figure read as GiB (79.2 / 80 and 139.7 / 141 above).
REPORTED_SHARE = 0.99


def torch_gib(sold_gb: float) -> float:
    """The memory torch reports for a GPU sold as `sold_gb` GB."""
    return TORCH_GIB.get(float(sold_gb), sold_gb * REPORTED_SHARE)
