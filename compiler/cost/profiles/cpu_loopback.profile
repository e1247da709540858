# This development machine: 2 cores of an AMD EPYC (x86-64 with AVX2 and
# FMA) under a hypervisor, one rank per core, one OpenBLAS thread per rank,
# ranks talking over loopback TCP through Gloo.
#
# Sources
# - Peak: 2 FMA pipes x 8 f32 lanes x 2 FLOP x ~2.5 GHz = 80 GFLOP/s per
#   core (AMD Zen; /proc/cpuinfo flags avx2, fma); memory: ~10 GB/s for
#   one core's streaming copy (typical of one Zen core in a VM).
# - Gloo 0.5's AllreduceRing (what runtime/comm/gloo runs): n-1 rounds,
#   each sending the whole buffer to the right neighbour and adding what
#   arrives from the left, so whole_buffer_ring (cost_model.h).
# - Loopback TCP: tens of us per message on a busy 2-core VM, a few GB/s of
#   copy bandwidth through the kernel.
# These are priors; `simulate --machine cpu_loopback --calibrate TRACE`
# fits per-op scales, alpha, beta and the host's time between steps from a
# `train --trace` of this machine (see tools/simulate/README.md).
name                           = cpu_loopback
compute.peak_flops             = 80e9
compute.memory_bandwidth       = 10e9
compute.kernel_overhead_us     = 1
compute.host_synchronous       = true    # the rank's thread runs each kernel
compute.step_overhead_us       = 100
efficiency.matmul              = 0.5
efficiency.elementwise         = 0.5
efficiency.data                = 0.2
network.ranks_per_node         = 1024    # one machine: every rank on loopback
network.intra.alpha_us         = 50
network.intra.bandwidth_GBps   = 2
network.inter.alpha_us         = 50
network.inter.bandwidth_GBps   = 2
network.all_reduce             = whole_buffer_ring
network.reduce_bandwidth       = 5e9
