// The CUDA launch of convert.cu's kernels, on the host: the few CUDA names
// the kernels use (the built-in index variables and the function-space
// qualifiers) and a `launch` that runs every thread of a grid in turn.
//
// Why it exists: two programs run convert.cu compiled as C++ without a GPU,
// the kernels' host test (crates/arrow-device/tests/kernels/
// host_emulation.cpp) and the CUDA driver stand-in's cuLaunchKernel
// (crates/cuda-standin/src/kernels.cpp). Both include this header and then
// convert.cu, so there is one definition of the kernels' logic (convert.cu)
// and one of how a launch runs it (this file): what the host test checks is
// what the stand-in runs.
//
// Include it before convert.cu; it does not include convert.cu itself. The
// built-in variables are `thread_local`: the stand-in runs kernels on several
// stream worker threads at once, and each launch must see only its own
// indices. Threads of one launch run one after another, never concurrently,
// which the kernels allow (each thread writes only its own bytes, and none
// synchronises with another).
#ifndef ARROW_DEVICE_CUDA_HOST_LAUNCH_H
#define ARROW_DEVICE_CUDA_HOST_LAUNCH_H

// CUDA's dim3, as far as the kernels read it.
struct Dim3 {
    unsigned x, y, z;
};

// The built-in variables of the running thread, set by `launch`.
[[maybe_unused]] static thread_local Dim3 gridDim, blockDim, blockIdx, threadIdx;

// Function-space qualifiers: every function is a host function here.
#define __global__
#define __device__
#define __forceinline__ inline
// GCC and Clang accept `__restrict__` as it is; MSVC spells it `__restrict`.
#if defined(_MSC_VER) && !defined(__clang__)
#define __restrict__ __restrict
#endif

// Runs `kernel` (a callable taking no arguments that calls one kernel) as a
// grid of `grid` blocks of `block` threads each: every block in turn, z then
// y then x (x fastest), and within a block every thread in the same order,
// with blockIdx and threadIdx set before each call. An empty grid or block
// (any dimension 0) runs nothing, as a launch of no threads would.
template <class Kernel>
inline void launch(Dim3 grid, Dim3 block, Kernel kernel)
{
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz) {
        for (unsigned by = 0; by < grid.y; ++by) {
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                blockIdx = Dim3{bx, by, bz};
                for (unsigned tz = 0; tz < block.z; ++tz) {
                    for (unsigned ty = 0; ty < block.y; ++ty) {
                        for (unsigned tx = 0; tx < block.x; ++tx) {
                            threadIdx = Dim3{tx, ty, tz};
                            kernel();
                        }
                    }
                }
            }
        }
    }
}

#endif  // ARROW_DEVICE_CUDA_HOST_LAUNCH_H
