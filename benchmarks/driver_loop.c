/* The driver's own floor for benchmarks/launch_loop.py: a tight loop of cuLaunchKernel from C, with
   the parameters tapegrad's kernel ABI passes for a 3-array kernel (the 48-byte grid bounds and
   three 88-byte array descriptors) and with three plain pointers, on a created blocking stream (as
   tapegrad's default stream is). Prints "<name> <min> <median>" in microseconds per launch.

   cc -O2 driver_loop.c -I<cuda include> <libcuda.so.1> -o driver_loop; ./driver_loop LAUNCHES ROUNDS */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BODY \
    ".reg .f32 %f<4>;\n.reg .b64 %rd<4>;\n" \
    "ld.param.u64 %rd1, [a];\nld.param.u64 %rd2, [b];\nld.param.u64 %rd3, [c];\n" \
    "cvta.to.global.u64 %rd1, %rd1;\ncvta.to.global.u64 %rd2, %rd2;\ncvta.to.global.u64 %rd3, %rd3;\n" \
    "ld.global.f32 %f1, [%rd1];\nld.global.f32 %f2, [%rd2];\nadd.f32 %f3, %f1, %f2;\n" \
    "st.global.f32 [%rd3], %f3;\nret;\n}\n"

static const char *PTX =
    ".version 7.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry ptrs(.param .u64 a, .param .u64 b, .param .u64 c)\n{\n" BODY
    ".visible .entry abi(.param .align 8 .b8 bounds[48], .param .align 8 .b8 a[88], "
    ".param .align 8 .b8 b[88], .param .align 8 .b8 c[88])\n{\n" BODY;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void loop(const char *name, CUfunction f, CUstream s, void **args, int n, int rounds) {
    double t[64];
    if (rounds > 64) rounds = 64;
    for (int r = 0; r < rounds; r++) {
        cuCtxSynchronize();
        double t0 = now();
        for (int i = 0; i < n; i++) cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, args, NULL);
        cuCtxSynchronize();
        t[r] = (now() - t0) / n * 1e6;
    }
    qsort(t, rounds, sizeof(double), cmp);
    printf("%s %.3f %.3f\n", name, t[0], t[rounds / 2]);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 9;
    CUdevice d;
    CUcontext ctx;
    CUmodule m;
    CUfunction fp, fa;
    CUdeviceptr a, b, c;
    CUstream s;
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&ctx, d) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&m, PTX) || cuModuleGetFunction(&fp, m, "ptrs") || cuModuleGetFunction(&fa, m, "abi") ||
        cuMemAlloc(&a, 4) || cuMemAlloc(&b, 4) || cuMemAlloc(&c, 4) || cuStreamCreate(&s, CU_STREAM_DEFAULT)) {
        fprintf(stderr, "driver_loop: CUDA setup failed\n");
        return 1;
    }
    unsigned char bounds[48] = {0}, da[88] = {0}, db[88] = {0}, dc[88] = {0};
    memcpy(da, &a, 8);
    memcpy(db, &b, 8);
    memcpy(dc, &c, 8);
    void *pargs[] = {&a, &b, &c}, *aargs[] = {bounds, da, db, dc};
    loop("driver_abi", fa, s, aargs, n, rounds);
    loop("driver_ptrs", fp, s, pargs, n, rounds);
    return 0;
}
