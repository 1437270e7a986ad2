#include <metal_stdlib>
using namespace metal;
kernel void k_matmul(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  float acc1[2];
  int gidx1 = gid.y; /* 8 */
  int lidx0 = lid.x; /* 32 */
  int gidx0 = gid.x; /* 8 */
  int alu2 = (((lidx0>>1)&3)*64);
  int alu3 = ((lidx0>>4)*256);
  int alu4 = (((gidx1*512)+alu2)+alu3);
  int alu5 = (gidx0*8);
  int alu6 = ((lidx0&1)*2);
  int alu7 = (((lidx0>>3)&1)*4);
  acc1[0] = 0.0f;
  acc1[1] = 0.0f;
  for (int ridx8 = 0; ridx8 < 8; ridx8++) {
    float ld9 = acc1[0];
    float ld10 = acc1[1];
    float2 ld11 = *((const device float2*)((data1+(((alu4+(ridx8*8))+alu6)+alu7))));
    float2 ld12 = *((const device float2*)((data1+((((((ridx8*512)+alu2)+alu3)+alu5)+alu6)+alu7))));
    simdgroup_float8x8 sg_a13, sg_b14;
    simdgroup_float8x8 sg_c15;
    sg_a13.thread_elements()[0] = ld11.x; sg_a13.thread_elements()[1] = ld11.y;
    sg_b14.thread_elements()[0] = ld12.x; sg_b14.thread_elements()[1] = ld12.y;
    sg_c15.thread_elements()[0] = 0.0f; sg_c15.thread_elements()[1] = 0.0f;
    simdgroup_multiply_accumulate(sg_c15, sg_a13, sg_b14, sg_c15);
    float sg_d16 = sg_c15.thread_elements()[0];
    float sg_d17 = sg_c15.thread_elements()[1];
    acc1[0] = (ld9+sg_d16);
    acc1[1] = (ld10+sg_d17);
  }
  float ld18 = acc1[0];
  float ld19 = acc1[1];
  *((device float2*)((data0+(((alu4+alu5)+alu6)+alu7)))) = float2(ld18, ld19);
}
