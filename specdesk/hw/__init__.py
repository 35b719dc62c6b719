"""Hardware readings (NVML, torch.cuda, psutil). Failures become "not available" values, never exceptions."""
