// Conversions between Arrow validity bitmaps and byte-per-value masks on the
// GPU, for arrow-device's CUDA Array Interface import and export.
//
// Arrow packs validity (and booleans) LSB-first: value i is bit (i % 8) of
// byte i / 8 (Arrow columnar format, "Validity bitmaps"). The CUDA Array
// Interface's `mask` and `|b1` arrays hold one byte per value, non-zero
// meaning valid (true).
//
// scripts/gen-ptx.sh compiles this file with NVRTC for compute_52 into
// convert.ptx (PTX ISA 7.0), which kernels.rs embeds and launches with 1-D
// grids of any size: each kernel is a grid-stride loop over 64-bit indices,
// so one launch covers any length. No includes: NVRTC compiles this file
// alone. The buffers of one launch never overlap (the Rust side's contract),
// hence __restrict__, which lets reads go through the read-only cache.

// The index of this thread's first element, and the distance between the
// elements of one thread, in 64 bits: a grid may cover more than 2^32.
__device__ __forceinline__ unsigned long long first_index()
{
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ unsigned long long grid_stride()
{
    return (unsigned long long)gridDim.x * blockDim.x;
}

// Packs the `len` bytes at `src` (non-zero = set) into the bitmap at `dst`,
// (len + 7) / 8 bytes, one thread per output byte. The bits of the last
// byte past `len` are written as zero, and `src` is never read past `len`.
extern "C" __global__ void arrow_device_pack_bits(
    const unsigned char* __restrict__ src,
    unsigned long long len,
    unsigned char* __restrict__ dst)
{
    // (len + 7) / 8 without overflowing near 2^64.
    const unsigned long long bytes = len / 8 + (len % 8 != 0);
    for (unsigned long long j = first_index(); j < bytes; j += grid_stride()) {
        const unsigned char* values = src + j * 8;
        // The bytes left from this one on: 8 or more except in the last.
        const unsigned long long rest = len - j * 8;
        unsigned int byte = 0;
#pragma unroll
        for (unsigned int k = 0; k < 8; ++k) {
            if (k < rest) {
                byte |= (unsigned int)(values[k] != 0) << k;
            }
        }
        dst[j] = (unsigned char)byte;
    }
}

// Unpacks `len` bits of `bitmap`, starting at bit `bit_offset`, into one
// byte per value at `dst`: 1 where the bit is set, 0 where it is not. One
// thread per output byte.
extern "C" __global__ void arrow_device_unpack_bits(
    const unsigned char* __restrict__ bitmap,
    unsigned long long bit_offset,
    unsigned long long len,
    unsigned char* __restrict__ dst)
{
    for (unsigned long long i = first_index(); i < len; i += grid_stride()) {
        const unsigned long long bit = bit_offset + i;
        dst[i] = (bitmap[bit / 8] >> (bit % 8)) & 1;
    }
}
