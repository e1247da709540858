# NVIDIA H100 SXM5 80GB, 8 per node on NVLink 4 / NVSwitch, nodes joined by
# 400 Gb/s NDR InfiniBand, one ConnectX-7 adapter per GPU (the DGX H100 /
# HGX H100 reference design, rail-optimised).
#
# Sources
# - NVIDIA H100 Tensor Core GPU datasheet (SXM5): FP32 67 TFLOPS; TF32
#   Tensor Core 989 TFLOPS *with sparsity*, so 494.7 dense; HBM3 3.35 TB/s;
#   NVLink 900 GB/s per GPU (both directions together, 450 GB/s each way).
# - nccl-tests all_reduce_perf on 8 x H100 (NVIDIA/nccl-tests#212, NCCL's
#   maintainer): 450 GB/s is the NVLink line rate; with the protocol
#   overhead (~20%) the ring reaches a busbw of ~370 GB/s (NVLink SHARP
#   reaches ~480 GB/s, which this model does not assume).
# - The same datasheet: BF16 Tensor Core 1,979 TFLOPS *with sparsity*, so 989.4 dense.
# - Between nodes: 400 Gb/s = 50 GB/s per adapter. NCCL runs one ring per
#   adapter, so a ring that spans nodes has a busbw of about
#   8 adapters x 50 GB/s x ~0.9 (protocol) = 360 GB/s per rank, capped by
#   the NVLink figure above. With one 400 Gb/s adapter per *node* instead,
#   use 45 here.
# - Latency (alpha, per step of a collective): NCCL's LL protocol takes
#   about 1 us per NVLink hop; small all-reduces across nodes take a few us
#   per step (nccl-tests' 8-byte all-reduce: tens of us for ~8-16 steps).
#   Estimates; calibrate them on the machine (--calibrate).
# - Kernel overhead and efficiencies: estimates (cuBLAS SGEMM reaches ~70%
#   of the FP32 peak on large products; elementwise kernels ~70% of HBM
#   bandwidth; this repository's attention kernel is not a flash kernel).
name                           = h100_nvlink_ib
compute.peak_flops             = 67e12
compute.peak_flops_tf32        = 494.7e12
compute.peak_flops_bf16        = 989.4e12
compute.memory_bandwidth       = 3.35e12
compute.kernel_overhead_us     = 3
compute.host_synchronous       = false   # CUDA streams; steps replay as CUDA graphs
compute.step_overhead_us       = 50      # replay launch, loss read back
efficiency.matmul              = 0.7
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
network.intra.alpha_us         = 1.0
network.intra.bandwidth_GBps   = 370
network.inter.alpha_us         = 5.0
network.inter.bandwidth_GBps   = 360
network.all_reduce             = auto    # NCCL's tuner: ring or tree, the faster
network.reduce_bandwidth       = 2.5e12
