"""Full tier of the conformance kit: stress and several instances of the device."""

from __future__ import annotations

import numpy as np

from tinycore.testkit.target import KitTarget, KitTargetFixture


class FullTier(KitTargetFixture):
    """Allocation churn, many launches of one kernel, and sharding across ``NAME`` and ``NAME:1``."""

    def test_allocation_churn_returns_memory(self, target: KitTarget):
        target.require_available()
        from tinycore.device import Buffer
        from tinycore.dtype import dtypes

        for round_index in range(200):
            size = 1 + (round_index * 97) % 5000
            buffer = Buffer(target.family, size, dtypes.float32).allocate()
            buffer.copyin(memoryview(np.full(size, round_index, dtype=np.float32).tobytes()))
            out = np.empty(size, dtype=np.float32)
            buffer.copyout(memoryview(out).cast("B"))
            assert out[0] == out[-1] == round_index
            buffer.deallocate()

    def test_many_launches_of_one_kernel(self, target: KitTarget):
        target.require_available()
        from tinycore.tensor import Tensor

        total = Tensor.zeros(64, device=target.family).contiguous().realize()
        for _ in range(300):
            total = (total + 1).realize()
        np.testing.assert_array_equal(total.numpy(), np.full(64, 300, dtype=np.float32))

    def test_two_instances_share_a_sharded_computation(self, target: KitTarget):
        target.require_available(count=2)
        from tinycore.tensor import Tensor

        devices = (target.family, f"{target.family}:1")
        array = np.arange(48, dtype=np.float32).reshape(8, 6)
        sharded = Tensor(array).shard(devices, axis=0)
        np.testing.assert_allclose((sharded * 2).sum(axis=1).numpy(), (array * 2).sum(axis=1), rtol=1e-6)
        np.testing.assert_allclose(sharded.sum().numpy(), array.sum(), rtol=1e-6)
        moved = Tensor(array, device=devices[0]).to(devices[1])
        np.testing.assert_array_equal((moved + 1).numpy(), array + 1)
