/* SPDX-License-Identifier: MIT */
/*
 * gpu_probe.c - the GPU bundle's first step (tests/gpu/run.sh): is there a
 * GPU to check? Asks the CUDA runtime (linked statically, as in tierd) for
 * the devices and names them. Needs nothing but glibc and, for a GPU, the
 * driver's libcuda.so.1; nvidia-smi may be absent where this runs.
 * Exit 0: at least one device answers. 77: no GPU here (no driver library,
 * or the driver sees no device, or it fails and there is no /dev/nvidiactl).
 * 1: a driver and its device nodes are there but the runtime cannot use
 * them (e.g. a driver older than this CUDA 13 runtime): a failure, not a skip.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    int n = 0, drv = 0, rt = 0;
    cudaError_t e;

    /* the runtime loads the driver library itself; asking first tells "no
     * driver installed" apart from the runtime's other errors. Kept loaded. */
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
        printf("gpu: no CUDA driver library (libcuda.so.1): %s\n", dlerror());
        return 77;
    }
    e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        printf("gpu: the CUDA driver sees no device\n");
        return 77;
    }
    if (e != cudaSuccess) {
        int nodes = access("/dev/nvidiactl", F_OK) == 0;

        printf("gpu: cudaGetDeviceCount: %s (%s, %d)%s\n", cudaGetErrorString(e),
               cudaGetErrorName(e), (int)e,
               nodes ? "" : "; no /dev/nvidiactl: no GPU here");
        return nodes ? 1 : 77;
    }
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("gpu: %d device(s), driver API %d.%d, runtime %d.%d\n", n, drv / 1000,
           drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;

        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            continue;
        printf("gpu: device %d: %s, sm_%d%d, %.1f GiB\n", i, p.name, p.major, p.minor,
               (double)p.totalGlobalMem / (1 << 30));
    }
    return 0;
}
