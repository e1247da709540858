# Shared by collect.sh, check_pack.sh and run.sh (sourced, not run): what
# manifest.txt lists, and which shared libraries a pack carries.

# Libraries every Linux machine has (glibc's own): never packed.
GC_BASIC_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so)'
# The driver's and the CUDA toolkit's libraries (cuDNN and NCCL with
# them): the GPU machine has them (/usr/local/cuda, or PyTorch's nvidia
# wheels); too large to carry (cuBLASLt alone is 540 MB).
GC_DEVICE_LIBS='^(libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcudnn[a-z_]*\.so|libnccl\.so|libnvrtc[a-z-]*\.so|libnvJitLink\.so)'
# The C++ runtime: packed under lib/fallback and used only where the
# machine's own is older than the build's (run.sh decides).
GC_FALLBACK_LIBS='^(libstdc\+\+\.so|libgcc_s\.so)'

# manifest.txt's entries of the given kinds, one "kind label path" (or
# "kind path" for file and data) a line.
gc_manifest() {
  local manifest=$1
  shift
  local kinds=" $* "
  local kind rest
  while read -r kind rest; do
    case "$kind" in '' | '#'*) continue ;; esac
    [[ "$kinds" == *" $kind "* ]] && echo "$kind $rest"
  done <"$manifest"
  return 0
}

# The pack paths of manifest.txt's programs (exe, gtest, plugin).
gc_programs() {
  gc_manifest "$1" exe gtest plugin | awk '{print $3}'
}

# `ldd FILE` as "NAME PATH" lines (PATH "-" when not found), the loader
# and the vDSO left out.
gc_ldd() {
  ldd "$1" 2>/dev/null | awk '$2 == "=>" { print $1, ($3 == "not" ? "-" : $3) }'
}
