#!/bin/sh
# Packs what building ccworker with NCCL needs from a CUDA toolkit already
# on this machine (nvcc and the tools it runs, the headers, the CUDA
# runtime, NCCL, the driver stub) into an image for
# docker/Dockerfile.cuda-debian to copy from, under /usr/local/cuda in the
# usual layout. For machines where nvidia/cuda cannot be pulled.
#
#   docker/cuda-toolkit-image.sh [CUDA_HOME] [TAG]
#     (defaults /usr/local/cuda and ccl-cuda-toolkit:13.0)
set -eu
home=$(readlink -f "${1:-/usr/local/cuda}")
tag=${2:-ccl-cuda-toolkit:13.0}
docker=${DOCKER:-docker}
lib=$home/lib64
[ -d "$lib" ] || lib=$home/lib
for needed in bin/nvcc nvvm/bin/cicc include/cuda_runtime.h include/nccl.h; do
  if [ ! -e "$home/$needed" ]; then
    echo "cuda-toolkit-image: $home has no $needed" >&2
    exit 1
  fi
done
if ! ls "$lib"/libnccl.so.* "$lib"/libcudart.so.* >/dev/null 2>&1; then
  echo "cuda-toolkit-image: no libnccl.so.* and libcudart.so.* in $lib" >&2
  exit 1
fi
stage=$(mktemp -d /tmp/cuda-toolkit-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
cuda=$stage/usr/local/cuda
mkdir -p "$cuda/lib64" "$cuda/targets/x86_64-linux"
# Hard links where the stage is on the same file system: no copy of the
# toolkit's 400 MB.
copy() { cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"; }
for dir in bin nvvm include; do
  copy "$(readlink -f "$home/$dir")" "$cuda/$dir"
done
for file in "$lib"/libcudart.so* "$lib"/libcudart_static.a "$lib"/libcudadevrt.a \
  "$lib"/libculibos.a \
  "$lib"/libnccl.so* "$lib"/stubs; do
  if [ -e "$file" ]; then copy "$file" "$cuda/lib64/"; fi
done
ln -s lib64 "$cuda/lib"
ln -s ../../include "$cuda/targets/x86_64-linux/include"
ln -s ../../lib64 "$cuda/targets/x86_64-linux/lib"
tar -C "$stage" --numeric-owner -c usr | "$docker" import - "$tag" >/dev/null
echo "cuda-toolkit-image: $tag from $home"
