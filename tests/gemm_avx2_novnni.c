/* gemm_avx2_novnni.c - kernels/gemm_avx2.c built never to take its AVX-VNNI
 * int8 tile (FF_NO_AVX_VNNI), for test_compute_kernels_novnni: on a CPU with
 * AVX-VNNI the host's build takes that tile, and this one checks the tile
 * of the CPUs without it (tests/CMakeLists.txt). */
#define FF_NO_AVX_VNNI
#include "../kernels/gemm_avx2.c"
