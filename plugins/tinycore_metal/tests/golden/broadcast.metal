#include <metal_stdlib>
using namespace metal;
kernel void k_broadcast(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = gid.x; /* 4 */
  int lidx1 = lid.y; /* 16 */
  int lidx0 = lid.x; /* 16 */
  int alu1 = (lidx0*4);
  int alu2 = (((gidx0*1024)+(lidx1*64))+alu1);
  float4 ld3 = *((const device float4*)((data1+alu2)));
  float4 ld4 = *((const device float4*)((data2+alu1)));
  *((device float4*)((data0+alu2))) = float4((ld3.x+ld4.x), (ld3.y+ld4.y), (ld3.z+ld4.z), (ld3.w+ld4.w));
}
