"""`aotc profile`: what Nsight Compute would report, measured without a GPU."""
