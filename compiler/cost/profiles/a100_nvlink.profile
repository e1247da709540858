# NVIDIA A100 SXM4 80GB, 8 per node on NVLink 3 / NVSwitch (DGX A100),
# nodes joined by 200 Gb/s HDR InfiniBand, one adapter per GPU.
#
# Sources
# - NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): FP32 19.5 TFLOPS;
#   TF32 Tensor Core 312 TFLOPS *with sparsity*, so 156 dense; HBM2e
#   2,039 GB/s; NVLink 600 GB/s per GPU (both directions, 300 GB/s each).
# - nccl-tests all_reduce_perf on 8 x A100 SXM4 80GB over NVLink
#   (NVIDIA/nccl-tests#149, #178): busbw ~200-210 GB/s for large messages.
# - The same datasheet: BF16 Tensor Core 624 TFLOPS *with sparsity*, so 312 dense.
# - Between nodes: 200 Gb/s = 25 GB/s per adapter, one ring per adapter:
#   8 x 25 GB/s x ~0.9 = 180 GB/s per rank (see h100_nvlink_ib.profile).
# - Latency, kernel overhead, efficiencies: estimates as for the H100;
#   calibrate them on the machine (--calibrate).
name                           = a100_nvlink
compute.peak_flops             = 19.5e12
compute.peak_flops_tf32        = 156e12
compute.peak_flops_bf16        = 312e12
compute.memory_bandwidth       = 2.039e12
compute.kernel_overhead_us     = 4
compute.host_synchronous       = false
compute.step_overhead_us       = 50
efficiency.matmul              = 0.75
efficiency.attention           = 0.35
efficiency.convolution         = 0.6
efficiency.elementwise         = 0.7
efficiency.normalization       = 0.6
efficiency.embedding           = 0.5
efficiency.loss                = 0.6
efficiency.pooling             = 0.6
efficiency.optimizer           = 0.7
efficiency.data                = 0.5
network.ranks_per_node         = 8
network.intra.alpha_us         = 1.5
network.intra.bandwidth_GBps   = 200
network.inter.alpha_us         = 6.0
network.inter.bandwidth_GBps   = 180
network.all_reduce             = auto
network.reduce_bandwidth       = 1.5e12
