// The stand-in's kernels: arrow-device's CUDA kernels, run on the host for
// cuLaunchKernel.
//
// The stand-in cannot run the PTX that arrow-device loads, so it runs the
// CUDA C the PTX is made from instead: this file compiles
// crates/arrow-device/src/device/cuda/kernels/convert.cu itself as C++, with
// the CUDA names it uses and the launch loop from host_launch.h beside it
// (build.rs puts that directory on the include path). There is one
// definition of the kernels' logic (convert.cu) and one of how a launch runs
// it (host_launch.h), shared with the kernels' host test
// (crates/arrow-device/tests/kernels/host_emulation.cpp), so the stand-in
// runs exactly what that test checks, from the source the GPU's PTX is
// generated from.
//
// The Rust side (cuModuleGetFunction, cuLaunchKernel) reaches the kernels by
// their PTX entry names through the two functions below. They are called on
// several stream worker threads at once: host_launch.h's built-in variables
// are thread_local, and nothing here has other state. No C++ exception can
// leave them (they are noexcept, and nothing they call throws).
#include <cstdint>
#include <cstring>

#include "host_launch.h"
#include "convert.cu"

namespace {

// A kernel parameter as cuLaunchKernel hands it over: 8 bytes, already read
// from the caller's kernelParams. Pointers must be host-addressable: the
// caller translates device pointers to their read-write alias first.
using Param = unsigned long long;

template <class T>
T* pointer(Param value) noexcept
{
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(value));
}

// Runs one kernel over `grid` x `block` with its parameters read from `p`.
using Trampoline = void (*)(Dim3 grid, Dim3 block, const Param* p) noexcept;

void pack_bits(Dim3 grid, Dim3 block, const Param* p) noexcept
{
    const unsigned char* src = pointer<const unsigned char>(p[0]);
    const unsigned long long len = p[1];
    unsigned char* dst = pointer<unsigned char>(p[2]);
    launch(grid, block, [=] { arrow_device_pack_bits(src, len, dst); });
}

void unpack_bits(Dim3 grid, Dim3 block, const Param* p) noexcept
{
    const unsigned char* bitmap = pointer<const unsigned char>(p[0]);
    const unsigned long long bit_offset = p[1];
    const unsigned long long len = p[2];
    unsigned char* dst = pointer<unsigned char>(p[3]);
    launch(grid, block, [=] { arrow_device_unpack_bits(bitmap, bit_offset, len, dst); });
}

struct Kernel {
    const char* entry;  // the PTX entry name (convert.cu's extern "C" name)
    int params;         // how many 8-byte parameters it takes
    Trampoline run;
};

// Every kernel of convert.cu, by entry name.
constexpr Kernel kKernels[] = {
    {"arrow_device_pack_bits", 3, pack_bits},
    {"arrow_device_unpack_bits", 4, unpack_bits},
};

const Kernel* find(const char* entry) noexcept
{
    if (entry == nullptr) {
        return nullptr;
    }
    for (const Kernel& kernel : kKernels) {
        if (std::strcmp(kernel.entry, entry) == 0) {
            return &kernel;
        }
    }
    return nullptr;
}

}  // namespace

// Number of 8-byte parameters of host kernel `entry` (a NUL-terminated PTX
// entry name), or -1 when the stand-in has no host implementation of it.
extern "C" int cuda_standin_kernel_params(const char* entry) noexcept
{
    const Kernel* kernel = find(entry);
    return kernel != nullptr ? kernel->params : -1;
}

// Runs kernel `entry` over grid x block; params points to that many 64-bit
// values (pointers already host-addressable, passed as integers). Returns 0,
// or -1 for an unknown entry (or a null entry, grid, block or params).
extern "C" int cuda_standin_run_kernel(const char* entry, const unsigned grid[3],
                                       const unsigned block[3],
                                       const unsigned long long* params) noexcept
{
    const Kernel* kernel = find(entry);
    if (kernel == nullptr || grid == nullptr || block == nullptr || params == nullptr) {
        return -1;
    }
    kernel->run(Dim3{grid[0], grid[1], grid[2]}, Dim3{block[0], block[1], block[2]}, params);
    return 0;
}
