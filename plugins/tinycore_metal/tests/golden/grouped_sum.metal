#include <metal_stdlib>
using namespace metal;
kernel void k_grouped_sum(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup __attribute__((aligned(16))) float smem0[16];
  float acc1[1];
  float acc2[1];
  int lidx0 = lid.x; /* 16 */
  *acc1 = 0.0f;
  *acc2 = 0.0f;
  for (int ridx3 = 0; ridx3 < 256; ridx3++) {
    float ld4 = *acc2;
    float ld5 = *(data1+((ridx3*16)+lidx0));
    *acc2 = (ld4+ld5);
  }
  float ld6 = *acc2;
  *(smem0+lidx0) = ld6;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int ridx7 = 0; ridx7 < 16; ridx7++) {
    float ld8 = *acc1;
    float ld9 = *(smem0+ridx7);
    *acc1 = (ld8+ld9);
  }
  float ld10 = *acc1;
  if (((lidx0!=0)!=1)) {
    *data0 = ld10;
  }
}
