"""Panel packing of matmul right operands and copies of padded convolution inputs: a scheduling pass over the
tensor graph, run on a schedule-cache miss.

A renderer that declares ``gemm_panel_bytes`` (CPU-style: `tinycore.renderer.Renderer`) wants the right operand
``(..., K, N)`` of a large matrix product laid out in column panels ``(..., N / p, K, p)``, ``p`` elements of
``gemm_panel_bytes`` each: its register-blocked matmul kernel then reads one panel row (``p`` consecutive elements)
per reduce step, and a column tile's strip of the operand is contiguous. `Tensor.dot` builds the plain product; this
pass finds it in the graph and reads the right operand through a packed copy instead.

**What a product looks like.** For ``x (..., M, K) @ w (..., K, N)`` `Tensor.dot` builds::

    REDUCE_AXIS(ADD, (last,))                       shape (..., M, N, 1)
      [CAST]                                        int products summed in a wider dtype
        MUL                                         shape (..., M, N, K)
          [EXPAND] [CAST] RESHAPE(x ..., (..., M, 1, K))
          [EXPAND] [RESHAPE: leading 1s] [CAST] RESHAPE(PERMUTE(w, swap the last two), (..., 1, N, K))

(16-bit floats are cast to float32 before the product, so ``w`` is then that ``CAST``; a mixed-dtype product casts
one side after its reshape.) The node ``RESHAPE(PERMUTE(w))`` is the right operand as the product reads it; the
rows are ``prod(x.shape[:-1])``, read off the left side's reshape.

**The decision** (`packed_operand`): pack when the device's renderer has panels of at least two elements, ``N`` is
wider than one panel, the product has at least `PACK_MIN_ROWS` rows and the operand at least `PACK_MIN_ELEMENTS`
elements, and either the operand is not a row-major view of its source (a transpose: its columns would otherwise be
gathered lane by lane) or it is large: at least `PACK_MIN_ROWS_IN_PLACE` rows reuse it, or it is more than
`PACK_MIN_BYTES_IN_PLACE` bytes (beyond a core's L2). When ``N`` is not a multiple of the panel the last panel is
filled up with zeros: the kernel pads its column axis to whole panels (``PADTO``) and still reads whole vectors,
storing only the real columns. A small row-major operand with such an ``N`` stays in place: the kernel's last column
tile overlaps the one before it (``OVERLAP``), whole vectors too.

**The rewrite.** The right source of a product's ``MUL`` (the operand's reshape, broadcast to the product's shape)
is replaced by the same chain over ``unpack(CONTIGUOUS(pack(w)))``. Products of one operand with different row
counts have different broadcasts, so each decides for itself. The input gradient autograd builds from the product
(``dx = dout @ w.T``: a ``MUL`` by that same source, summed over ``N``; `find_gradient_products`) reads ``w.T``, a
transpose: across the forward product's panels every lane would be a scalar load (130 vs 225 GFLOPS for the MLP's
128 x 512 x 512 gradient on a Zen 4), so it gets a copy of ``w.T`` packed along ``K`` instead, made by the same
kernel as the forward copy when the scheduler fuses them (both read ``w``). The values never change; only where
the kernels read them from.

**Padded convolution inputs** (`find_conv_inputs`, rule `_copy_conv_input`). The same renderers want a large padded
convolution input in memory: the convolution kernel then loads whole vectors of a row without a bounds check per lane
(the copy is cheap next to the ``cin * prod(kernel)`` reads of every element the convolution makes; measured 2x on a
3x3 conv of 8x64x56x56). `Tensor.conv2d` builds the plain view::

    REDUCE_AXIS(ADD, (cin/g, *kernel) axes, or the batch and output axes for the weight gradient)
      [CAST]
        MUL                                  shape (bs, g, cout/g, *out, cin/g, *kernel): 2m + 4 axes
          EXPAND ... [CAST] ... window view (RESHAPE PERMUTE EXPAND SHRINK, a strided window's tail PAD)
            PAD(((0, 0), (0, 0), *spatial))  the input (bs, cin, *spatial), padded
          EXPAND RESHAPE(weight)

A ``PAD`` one ``MUL`` source reaches through movement ops and casts only, with the input's rank ``m + 2``, batch
``bs`` and channels ``g * cin/g`` and its batch and channel axes unpadded, is a convolution input; the first such
``PAD`` from the top, skipping the tail a strided window adds to the first spatial axis (only the end of the last
axis padded, right above another such ``PAD``, `_window_fit`). It is read through ``CONTIGUOUS`` (every movement op
right above it, so the weight gradient's product reads the one copy too) when the device's renderer declares
``gemm_panel_bytes`` (`gemm_panel` nonzero) and it has at least `PACK_MIN_ELEMENTS` elements
(`copies_conv_input`); small inputs stay in cache either way: one kernel, no copy. ``x.pad(p).conv2d(w)`` is the very
graph of ``x.conv2d(w, padding=p)`` and is copied alike; a matmul of a padded matrix (a 3-axis product) and a pool
(no ``MUL``) are not convolutions.

**Caching.** The pass reads shapes, dtypes, the device, movement args and op structure only: everything the
schedule-cache key (`tinycore.engine.schedule_cache.KeyWalk`) covers, so a cache hit (which runs no pass) is right.

>>> from tinycore.dtype import dtypes
>>> from tinycore.engine.realized import new_buffer_uop
>>> x = new_buffer_uop("PYTHON", 8 * 4, dtypes.float).reshape((8, 4))
>>> pack_gemm_operands(UOp.sink(x + x)) is UOp.sink(x + x)  # no product: the graph is returned as it is
True
"""

from __future__ import annotations

from typing import Any

from tinycore.device import renderer_setting
from tinycore.helpers import prod
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = [
    "PACK_MIN_BYTES_IN_PLACE",
    "PACK_MIN_ELEMENTS",
    "PACK_MIN_ROWS",
    "PACK_MIN_ROWS_IN_PLACE",
    "copies_conv_input",
    "find_conv_inputs",
    "find_gradient_products",
    "find_products",
    "gemm_panel",
    "pack_gemm_operands",
    "packed_operand",
    "pm_pack_gemm",
]

PACK_MIN_ELEMENTS = 1 << 14  # operands smaller than this stay in cache anyway
PACK_MIN_ROWS = 16  # fewer rows than this (a matrix-vector product) reuse the right operand too little to repack
# A right operand already row-major in memory is repacked only when the kernel reads it from beyond a core's L2 or
# many rows reuse each panel. Measured on AVX2 (fp32, heuristic kernels, TinyJit replay, the copy included, GFLOPS
# packed vs in place): operands up to 256 KiB with up to 256 rows are faster in place (160^3: 146 vs 179, 256^3: 115
# vs 155), with 512 rows or more packed (512x256@256x256: 185 vs 160, 1024x128@128x128: 184 vs 168); 1-2 MiB ones
# gain packed even with 128 rows (128x784@784x512: 163 vs 119). A transposed operand (``dh @ w.T`` in a backward
# pass) is always repacked.
PACK_MIN_ROWS_IN_PLACE = 384
PACK_MIN_BYTES_IN_PLACE = 512 << 10


def gemm_panel(device: Any, itemsize: int) -> int:
    """Width in elements of the column panels `device`'s renderer wants a matmul's right operand of `itemsize`-byte
    elements packed into (its ``gemm_panel_bytes``; 0: no packing, or the device can't be asked).

    >>> gemm_panel("PYTHON", 4)
    0
    """
    nbytes = int(renderer_setting(device, "gemm_panel_bytes", 0) or 0)
    return nbytes // itemsize if nbytes >= 2 * itemsize else 0


def _row_major_view(w: UOp) -> bool:
    """Whether `w` is its source's elements in order along the last axis: the movement ops between `w` and the
    first computed or stored node only reshape or shrink (a ``PERMUTE``, ``FLIP``, ``PAD`` or ``EXPAND`` on the way
    may move other elements under the last axis)."""
    node = w
    while node.op in GroupOp.Movement:
        if node.op is not Ops.RESHAPE and node.op is not Ops.SHRINK:
            return False
        node = node.src[0]
    return True


def _swap_last_two(order: Any) -> bool:
    n = len(order)
    return n >= 2 and tuple(order) == (*range(n - 2), n - 1, n - 2)


def _strip(node: UOp, ops: tuple[Ops, ...]) -> UOp:
    while node.op in ops:
        node = node.src[0]
    return node


def _right_operand(side: UOp) -> UOp | None:
    """The ``RESHAPE(PERMUTE(w), (..., 1, N, K))`` node under `side`, the right source of a product's ``MUL`` (shape
    ``(..., N, K)``), or None when `side` is not a transposed operand reshaped that way."""
    n, k = side.shape[-2], side.shape[-1]
    node = _strip(side, (Ops.EXPAND,))
    while node.op in (Ops.RESHAPE, Ops.CAST):
        src = node.src[0]
        if node.op is Ops.RESHAPE and src.op is Ops.PERMUTE:
            shape, tshape = node.shape, src.shape
            if (
                _swap_last_two(src.arg)
                and len(shape) == len(tshape) + 1
                and shape[-3:] == (1, n, k)
                and tshape == (*shape[:-3], n, k)
            ):
                return node
            return None
        node = src
    return None


def _rows(side: UOp, k: Any) -> Any:
    """``prod(x.shape[:-1])`` for the left side `side` of a product's ``MUL`` (``RESHAPE(x, (..., M, 1, K))`` under an
    optional ``EXPAND`` and ``CAST``), or None when `side` is not shaped that way."""
    node = _strip(side, (Ops.EXPAND, Ops.CAST))
    if node.op is not Ops.RESHAPE or len(node.shape) < 3 or node.shape[-2:] != (1, k):
        return None
    return prod(node.shape[:-2])


def _product(reduce: UOp) -> tuple[UOp, Any] | None:
    """``(the MUL's right source, rows)`` when `reduce` is a matrix product as `Tensor.dot` builds it (see the module
    docstring), else None."""
    if reduce.arg[0] is not Ops.ADD:
        return None
    mul = reduce.src[0]
    if mul.op is Ops.CAST:
        mul = mul.src[0]
    if mul.op is not Ops.MUL or len(mul.src) != 2 or mul.shape is None or len(mul.shape) < 3:
        return None
    if tuple(reduce.arg[1]) != (len(mul.shape) - 1,):
        return None
    rows = _rows(mul.src[0], mul.shape[-1])
    if rows is None or _right_operand(mul.src[1]) is None or _is_comparison(mul.src[0]):
        return None
    return mul.src[1], rows


def _is_comparison(side: UOp) -> bool:
    """True when the left side of a product is a cast comparison, such as the one-hot matrix of an embedding:
    code generation turns such a product into one load per output (`tinycore.codegen.select_fold`), so packing
    its right operand would copy a whole table to read a few rows of it."""
    node = _strip(side, (Ops.EXPAND, Ops.CAST, Ops.RESHAPE))
    return node.op is Ops.CMPEQ


def find_products(sink: UOp) -> dict[UOp, Any]:
    """``{right side: rows}`` for every matrix product under `sink`, the right side being the ``MUL``'s source
    that reads the right operand (``[EXPAND] ... RESHAPE(PERMUTE(w))``, see the module docstring). Two products with
    one right side (the same broadcast of one operand) count the larger row count."""
    found: dict[UOp, Any] = {}
    for node in sink.toposort():
        if node.op is Ops.REDUCE_AXIS:
            product = _product(node)
            if product is not None:
                side, rows = product
                old = found.get(side)
                found[side] = rows if old is None or not isinstance(rows, int) or rows > old else old
    return found


def find_gradient_products(sink: UOp, products: dict[UOp, Any]) -> dict[UOp, Any]:
    """``{MUL: rows}`` for every product under `sink` that multiplies by the right side of one of `products` (as
    `find_products` returns them) but sums over its ``N`` axis: the input gradient ``dx = dout @ w.T`` autograd builds
    from ``x @ w`` (``REDUCE_AXIS(ADD, (ndim - 2,))`` of ``MUL(broadcast dout, side)``). Its right operand is ``w.T``
    ``(..., N, K)``, which it would read across the forward product's panels lane by lane; `_pack_gradient_product`
    gives it panels of its own."""
    found: dict[UOp, Any] = {}
    for node in sink.toposort():
        if node.op is not Ops.REDUCE_AXIS or node.arg[0] is not Ops.ADD:
            continue
        mul = node.src[0].src[0] if node.src[0].op is Ops.CAST else node.src[0]
        if mul.op is not Ops.MUL or len(mul.src) != 2 or mul.shape is None or len(mul.shape) < 3:
            continue
        if tuple(node.arg[1]) != (len(mul.shape) - 2,) or mul.src[1] not in products:
            continue
        found[mul] = prod(mul.shape[:-2])
    return found


def packed_operand(w: UOp, rows: Any) -> UOp | None:
    """The right operand `w` ``(..., K, N)`` of a matmul with `rows` rows, as the same logical view of a copy laid
    out in column panels ``(..., N / p, K, p)`` (zero-filled up to whole panels), or None when it stays in place
    (the decision of the module docstring).

    >>> from tinycore.dtype import dtypes
    >>> from tinycore.engine.realized import new_buffer_uop
    >>> packed_operand(new_buffer_uop("PYTHON", 512 * 512, dtypes.float).reshape((512, 512)), 512) is None
    True
    """
    shape = w.shape
    if shape is None or len(shape) < 2 or not all(isinstance(d, int) for d in (*shape, rows)):
        return None
    k, n = shape[-2], shape[-1]
    if rows < PACK_MIN_ROWS or k * n < PACK_MIN_ELEMENTS:
        return None
    device = w.device
    panel = gemm_panel(device, w.dtype.itemsize) if isinstance(device, str) else 0
    if panel < 2 or n <= panel:
        return None
    if _row_major_view(w):
        if rows < PACK_MIN_ROWS_IN_PLACE and k * n * w.dtype.itemsize <= PACK_MIN_BYTES_IN_PLACE:
            return None
    lead = tuple(shape[:-2])
    nl = len(lead)
    wide = -(-n // panel) * panel
    src = w if wide == n else w.pad(((0, 0),) * (nl + 1) + ((0, wide - n),))
    order = (*range(nl), nl + 1, nl, nl + 2)
    packed = src.reshape((*lead, k, wide // panel, panel)).permute(order).contiguous()
    unpacked = packed.permute(order).reshape((*lead, k, wide))
    return unpacked if wide == n else unpacked.shrink(tuple((0, d) for d in (*lead, k, n)))


def _read_through(side: UOp, right: UOp, operand: UOp) -> UOp:
    """`side` (a product's right ``MUL`` source: broadcasts and casts above `right`, the operand's reshape) rebuilt
    over `operand`, a view with the shape of ``right.src[0]``."""
    path = [side]  # side ... right: the broadcast and casts above the operand's reshape, rebuilt over the copy
    while path[-1] is not right:
        path.append(path[-1].src[0])
    new = operand.reshape(right.arg)
    for node in reversed(path[:-1]):
        new = node.replace(src=(new,))
    return new


def _pack_right_side(ctx: _Found, side: UOp) -> UOp | None:
    """`side` (a product's right ``MUL`` source, found by `find_products`) read through a packed copy of its
    operand, or None when it stays in place."""
    rows = ctx.products.get(side)
    if rows is None:
        return None
    right = _right_operand(side)
    if right is None:
        return None
    transpose = right.src[0]
    packed = packed_operand(transpose.src[0], rows)
    if packed is None:
        return None
    return _read_through(side, right, packed.permute(transpose.arg))


def _pack_gradient_product(ctx: _Found, mul: UOp) -> UOp | None:
    """`mul` (a gradient product's ``MUL``, found by `find_gradient_products`) reading ``w.T`` through a copy packed
    in panels along ``K``, its own output columns, or None when that operand stays in place. Matched before its
    sources (bottom-up), so the forward product's side it shares is still the original node here."""
    rows = ctx.gradients.get(mul)
    if rows is None:
        return None
    side = mul.src[1]
    right = _right_operand(side)
    if right is None:
        return None
    packed = packed_operand(right.src[0], rows)  # w.T (..., N, K): a transpose, packed whenever it is large enough
    if packed is None:
        return None
    return mul.replace(src=(mul.src[0], _read_through(side, right, packed)))


def _input_pad(node: UOp, m: int, mul_shape: tuple[Any, ...]) -> bool:
    """Whether `node` is a ``PAD`` of a convolution input ``(bs, cin, *spatial)`` as `Tensor.conv2d` builds it for
    the product of shape `mul_shape` (``(bs, groups, cout / groups, *out, cin / groups, *kernel)``, `m` spatial
    axes): the batch and channel axes unpadded and at least one spatial side padded."""
    if node.op is not Ops.PAD or node.shape is None or len(node.shape) != m + 2:
        return False
    pads = tuple(tuple(p) for p in node.arg)
    if pads[0] != (0, 0) or pads[1] != (0, 0) or all(p == (0, 0) for p in pads[2:]):
        return False
    return node.shape[0] == mul_shape[0] and node.shape[1] == mul_shape[1] * mul_shape[3 + m]


def _window_fit(pad: UOp, m: int, mul_shape: tuple[Any, ...]) -> bool:
    """Whether `pad` is the zero tail a strided window adds to the first spatial axis (``_window_1d``'s fit: only
    the end of the last axis padded) right above the input's own padding (through the ``PERMUTE`` that moved that
    axis last): the input is then the ``PAD`` below it."""
    pads = tuple(tuple(p) for p in pad.arg)
    if any(p != (0, 0) for p in pads[:-1]) or pads[-1][0] != 0:
        return False
    below = pad.src[0]
    if below.op is Ops.PERMUTE:
        below = below.src[0]
    return _input_pad(below, m, mul_shape)


def _conv_input(side: UOp, m: int, mul_shape: tuple[Any, ...]) -> UOp | None:
    """The padded convolution input `side` (one source of a product's ``MUL``) reads through movement ops and casts
    only, or None. The window view above the input may itself pad (a strided window's fit); the input's ``PAD`` is
    the first one from the top with the input's rank, batch and channels that is not such a fit."""
    node = side
    while node.op in GroupOp.Movement or node.op is Ops.CAST:
        if _input_pad(node, m, mul_shape) and not _window_fit(node, m, mul_shape):
            return node
        node = node.src[0]
    return None


def copies_conv_input(pad: UOp) -> bool:
    """Whether the padded convolution input `pad` is read through a copy in memory: its device's renderer declares
    ``gemm_panel_bytes`` (`gemm_panel` of its element size is nonzero) and it has at least `PACK_MIN_ELEMENTS`
    elements.

    >>> from tinycore.dtype import dtypes
    >>> from tinycore.engine.realized import new_buffer_uop
    >>> x = new_buffer_uop("PYTHON", 8 * 64 * 56 * 56, dtypes.float).reshape((8, 64, 56, 56))
    >>> copies_conv_input(x.pad(((0, 0), (0, 0), (1, 1), (1, 1))))  # PYTHON declares no panels
    False
    """
    shape, device = pad.shape, pad.device
    if shape is None or not all(isinstance(d, int) for d in shape) or not isinstance(device, str):
        return False
    return gemm_panel(device, pad.dtype.itemsize) > 0 and prod(shape) >= PACK_MIN_ELEMENTS


def find_conv_inputs(sink: UOp) -> set[UOp]:
    """The padded convolution inputs under `sink` to read through a copy: every ``PAD`` a convolution's product
    reads (see the module docstring) for which `copies_conv_input` holds. A product is a ``REDUCE_AXIS(ADD)`` of a
    ``MUL`` (or of its ``CAST``) of shape ``(bs, groups, cout / groups, *out, cin / groups, *kernel)``, ``2m + 4``
    axes for ``m`` spatial ones; the axes it sums do not matter, so the weight gradient (summed over the batch and
    the output positions) counts too."""
    found: set[UOp] = set()
    for node in sink.toposort():
        if node.op is not Ops.REDUCE_AXIS or node.arg[0] is not Ops.ADD:
            continue
        mul = node.src[0]
        if mul.op is Ops.CAST:
            mul = mul.src[0]
        shape = mul.shape
        if mul.op is not Ops.MUL or len(mul.src) != 2 or shape is None or len(shape) < 6 or len(shape) % 2:
            continue
        m = (len(shape) - 4) // 2
        for side in mul.src:
            pad = _conv_input(side, m, shape)
            if pad is not None and pad not in found and copies_conv_input(pad):
                found.add(pad)
    return found


def _copy_conv_input(ctx: _Found, use: UOp) -> UOp | None:
    """`use` (a movement op straight over a padded convolution input found by `find_conv_inputs`) reading the input
    through a ``CONTIGUOUS`` copy instead, or None when its source is no such input."""
    pad = use.src[0]
    if pad not in ctx.conv_inputs:
        return None
    return use.replace(src=(UOp(Ops.CONTIGUOUS, pad.dtype, (pad,)),))


class _Found:
    """What `pack_gemm_operands` found before rewriting: ``{right side: rows}`` of the matrix products, ``{MUL:
    rows}`` of their gradient products and the padded convolution inputs to copy (the rules' ``ctx``)."""

    __slots__ = ("conv_inputs", "gradients", "products")

    def __init__(self, products: dict[UOp, Any], conv_inputs: set[UOp], gradients: dict[UOp, Any] | None = None):
        self.products = products
        self.conv_inputs = conv_inputs
        self.gradients = gradients or {}


pm_pack_gemm = PatternMatcher(
    [
        (UPat(Ops.MUL, name="mul"), _pack_gradient_product),
        (UPat((Ops.EXPAND, Ops.RESHAPE, Ops.CAST), name="side"), _pack_right_side),
        (UPat(GroupOp.Movement, src=(UPat(Ops.PAD),), name="use"), _copy_conv_input),
    ],
    name="pack_gemm_operands",
)


def pack_gemm_operands(sink: UOp) -> UOp:
    """`sink` (a ``SINK`` of tensor-level uops) with the right operand of every matrix product the device wants
    packed read through a panel-packed copy, and every large padded convolution input read through a copy in memory
    (the module docstring). Returns `sink` itself when there is neither; the rewrite (`pm_pack_gemm`, the
    ``pack_gemm_operands`` pass) runs only when there is something to change."""
    products, conv_inputs = find_products(sink), find_conv_inputs(sink)
    if not products and not conv_inputs:
        return sink
    # bottom-up: a product's right side (and a gradient product's MUL) is matched as it was found, before its
    # sources are rewritten
    found = _Found(products, conv_inputs, find_gradient_products(sink, products))
    return graph_rewrite(sink, pm_pack_gemm, ctx=found, bottom_up=True, name="pack_gemm_operands")
