// The CUDA kernels of src/device/cuda/kernels/convert.cu, run on the host:
// CI has no GPU, so this compiles the kernel source itself as C++ (with the
// few CUDA names it uses, and the launch loop, from host_launch.h beside it,
// through which the CUDA driver stand-in crates/cuda-standin runs them too),
// runs every thread of each launch in turn for several grid shapes (the one
// kernels.rs uses, and small ones that make the grid-stride loops go round),
// and compares the output with a plain reference, in allocations of exactly
// the sizes the kernels may touch. scripts/check-ptx.sh builds it with
// AddressSanitizer and UndefinedBehaviorSanitizer, so a read or write out of
// bounds fails too.
//
// What it cannot see: anything about the GPU itself (the PTX, the launch,
// concurrency between threads, which the kernels do not rely on: each
// thread writes its own bytes). The GPU suite checks those.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "host_launch.h"
#include "convert.cu"

// kernels.rs's launch_dims with a block size and block cap of the caller's.
static unsigned blocks_for(unsigned long long work, unsigned block, unsigned cap) {
    unsigned long long blocks = (work + block - 1) / block;
    return blocks < cap ? (unsigned)blocks : cap;
}

// A byte per value: 0 (false) or one of several non-zero values (true).
static unsigned char byte_at(unsigned long long i) {
    switch ((i * 7 + i / 5) % 5) {
    case 1: return 1;
    case 3: return 200;
    case 4: return 2;
    default: return 0;
    }
}

static int failed(const char* what, unsigned long long len, unsigned long long at) {
    std::printf("host_emulation: %s differs from the reference (len %llu, at %llu)\n", what, len, at);
    return 1;
}

int main() {
    // {block cap, threads per block}: kernels.rs's shape first.
    const unsigned shapes[][2] = {{4096, 256}, {1, 1}, {3, 4}, {2, 32}, {5, 3}};
    unsigned long long checked = 0;
    for (const auto& shape : shapes) {
        const unsigned cap = shape[0], block = shape[1];
        for (unsigned long long len = 0; len <= 300; ++len) {
            unsigned char* bytes = (unsigned char*)std::malloc(len ? len : 1);
            for (unsigned long long i = 0; i < len; ++i) bytes[i] = byte_at(i);
            const unsigned long long bitmap_len = (len + 7) / 8;
            unsigned char* bitmap = (unsigned char*)std::malloc(bitmap_len ? bitmap_len : 1);
            std::memset(bitmap, 0xa5, bitmap_len);  // poison: every byte must be written
            if (bitmap_len) {
                // 1-D grids, as kernels.rs launches them.
                launch(Dim3{blocks_for(bitmap_len, block, cap), 1, 1}, Dim3{block, 1, 1},
                       [&] { arrow_device_pack_bits(bytes, len, bitmap); });
            }
            for (unsigned long long j = 0; j < bitmap_len; ++j) {
                unsigned char want = 0;
                for (unsigned k = 0; k < 8 && 8 * j + k < len; ++k) {
                    want |= (unsigned char)((bytes[8 * j + k] != 0) << k);
                }
                if (bitmap[j] != want) return failed("arrow_device_pack_bits", len, j);
                ++checked;
            }
            // Unpacking from every bit offset of that bitmap.
            for (unsigned long long offset = 0; offset <= len; ++offset) {
                const unsigned long long n = len - offset;
                unsigned char* out = (unsigned char*)std::malloc(n ? n : 1);
                std::memset(out, 0xa5, n);
                if (n) {
                    launch(Dim3{blocks_for(n, block, cap), 1, 1}, Dim3{block, 1, 1},
                           [&] { arrow_device_unpack_bits(bitmap, offset, n, out); });
                }
                for (unsigned long long i = 0; i < n; ++i) {
                    if (out[i] != (bytes[offset + i] != 0)) {
                        return failed("arrow_device_unpack_bits", n, i);
                    }
                    ++checked;
                }
                std::free(out);
            }
            std::free(bytes);
            std::free(bitmap);
        }
    }
    std::printf("host_emulation: both kernels match the reference (%llu values)\n", checked);
    return 0;
}
