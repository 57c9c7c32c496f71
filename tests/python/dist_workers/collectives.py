"""Every collective of the hccl backend against an exact reference, run by torchrun.

Each rank's input is a seeded function of (case, rank) built on the CPU, so every rank can
compute every other rank's input and the exact expected result. Values are small integers (and
powers of two for products), so sums and products are exact in float16 and bfloat16 too.
Prints "FAIL <case>: <why>" per mismatch and "collectives ok <n> checks" when all pass.
"""
import os
import sys
import time
import warnings
import zlib

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's new name
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ["LOCAL_RANK"])
torch.npu.set_device(LOCAL)
DEV = torch.device("npu", LOCAL)
dist.init_process_group("hccl")
assert dist.get_backend() == "hccl", dist.get_backend()

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int8, torch.int32, torch.int64, torch.uint8]
SIZES = [0, 1, 13, 4099]
failures: list[str] = []
checks = 0


def data(case: str, rank: int, n: int, dtype, kind="small"):
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if kind == "pow2":  # products stay exact: +-1, +-2
        v = torch.randint(0, 2, (n,), generator=g) + 1
        sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
        return (v * (sign if dtype not in (torch.uint8,) else 1)).to(dtype)
    lo = 0 if dtype == torch.uint8 else -8
    return torch.randint(lo, 9, (n,), generator=g).to(dtype)


def check(case: str, got: torch.Tensor, want: torch.Tensor, exact=True):
    global checks
    checks += 1
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        failures.append(f"{case}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} "
                        f"{tuple(want.shape)}")
        return
    ok = torch.equal(got, want) if exact else torch.allclose(got.double(), want.double(),
                                                             rtol=1e-2, atol=1e-2)
    if not ok:
        bad = (got != want).nonzero()[:3].flatten().tolist()
        failures.append(f"{case}: mismatch at {bad}: got {got.flatten()[:6].tolist()} "
                        f"want {want.flatten()[:6].tolist()}")


def reduce_ref(inputs, op, dtype):
    wide = [x.double() if dtype.is_floating_point else x.long() for x in inputs]
    if dtype == torch.bool:
        stack = torch.stack([x for x in inputs])
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            return stack.any(0)
        return stack.all(0)
    stack = torch.stack(wide)
    if op == dist.ReduceOp.SUM:
        out = stack.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = stack.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = stack.max(0).values
    elif op == dist.ReduceOp.AVG:
        out = stack.sum(0) / WORLD
    else:
        raise AssertionError(op)
    return out.to(dtype)


def ops_for(dtype):
    if dtype == torch.bool:
        return [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    if dtype.is_floating_point:
        ops.append(dist.ReduceOp.AVG)
    return ops


# ---- all_reduce: every dtype, op and size ---------------------------------------------------
for dtype in FLOATS + INTS + [torch.bool]:
    for op in ops_for(dtype):
        for n in SIZES:
            case = f"all_reduce {dtype} {op} n={n}"
            kind = "pow2" if op == dist.ReduceOp.PRODUCT else "small"
            if op == dist.ReduceOp.PRODUCT and dtype in (torch.int8, torch.uint8) and WORLD > 6:
                continue  # 2**8 overflows
            x = data(case, RANK, n, dtype, kind).to(DEV)
            dist.all_reduce(x, op=op)
            want = reduce_ref([data(case, r, n, dtype, kind) for r in range(WORLD)], op, dtype)
            # AVG divides by the world size: exact for powers of two only.
            check(case, x, want, exact=op != dist.ReduceOp.AVG or WORLD in (1, 2, 4, 8))

# PREMUL_SUM (FSDP's gradient scaling): factor applied before the sum.
for dtype in [torch.float32, torch.bfloat16]:
    case = f"all_reduce premul_sum {dtype}"
    x = data(case, RANK, 33, dtype).to(DEV)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
    want = (sum(data(case, r, 33, dtype).double() * 0.5 for r in range(WORLD))).to(dtype)
    check(case, x, want)

# A large tensor: crosses the staging buffer (HCCL_BUFFSIZE is set small by the test).
case = "all_reduce large"
n = 3 * 1024 * 1024 + 5
x = data(case, RANK, n, torch.float32).to(DEV)
dist.all_reduce(x)
check(case, x, reduce_ref([data(case, r, n, torch.float32) for r in range(WORLD)],
                          dist.ReduceOp.SUM, torch.float32))
for dtype in [torch.float16, torch.bfloat16]:
    case = f"all_reduce large {dtype}"
    n = 1024 * 1024 + 3
    x = data(case, RANK, n, dtype).to(DEV)
    dist.all_reduce(x)
    check(case, x, reduce_ref([data(case, r, n, dtype) for r in range(WORLD)],
                              dist.ReduceOp.SUM, dtype))

# ---- broadcast, reduce -------------------------------------------------------------------------
for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]:
    for root in sorted({0, WORLD - 1}):
        for n in [0, 7, 5000]:
            case = f"broadcast {dtype} root={root} n={n}"
            src = data(case, root, n, torch.float32).to(dtype) if dtype.is_complex else \
                data(case, root, n, dtype)
            x = (src if RANK == root else torch.zeros_like(src)).to(DEV)
            dist.broadcast(x, src=root)
            check(case, x, src)

for dtype in [torch.float32, torch.float16, torch.int32]:
    for op in [dist.ReduceOp.SUM, dist.ReduceOp.MAX]:
        root = WORLD - 1
        case = f"reduce {dtype} {op}"
        x = data(case, RANK, 101, dtype).to(DEV)
        dist.reduce(x, dst=root, op=op)
        if RANK == root:
            check(case, x, reduce_ref([data(case, r, 101, dtype) for r in range(WORLD)], op, dtype))

# ---- all_gather (list, into tensor, coalesced) -------------------------------------------------
for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8]:
    for n in SIZES:
        case = f"all_gather {dtype} n={n}"
        x = data(case, RANK, n, dtype).to(DEV)
        outs = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(WORLD)]
        dist.all_gather(outs, x)
        for r in range(WORLD):
            check(f"{case} block {r}", outs[r], data(case, r, n, dtype))
        case = f"all_gather_into_tensor {dtype} n={n}"
        x = data(case, RANK, n, dtype).to(DEV)
        out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(out, x)
        check(case, out, torch.cat([data(case, r, n, dtype) for r in range(WORLD)]))
# 2-D, stacked output; and in place (the input is this rank's block of the output, as FSDP2)
case = "all_gather_into_tensor 2d stacked"
x = data(case, RANK, 12, torch.float32).view(3, 4).to(DEV)
out = torch.empty(WORLD, 3, 4, device=DEV)
dist.all_gather_into_tensor(out, x)
check(case, out, torch.stack([data(case, r, 12, torch.float32).view(3, 4) for r in range(WORLD)]))
case = "all_gather_into_tensor in place"
out = torch.zeros(WORLD * 9, device=DEV)
out[RANK * 9:(RANK + 1) * 9].copy_(data(case, RANK, 9, torch.float32))
dist.all_gather_into_tensor(out, out[RANK * 9:(RANK + 1) * 9])
check(case, out, torch.cat([data(case, r, 9, torch.float32) for r in range(WORLD)]))

# ---- reduce_scatter (list, tensor) -------------------------------------------------------------
for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.int32]:
    for op in [dist.ReduceOp.SUM, dist.ReduceOp.MIN] + \
            ([dist.ReduceOp.AVG] if dtype.is_floating_point else []):
        for n in [0, 1, 13, 2049]:
            case = f"reduce_scatter_tensor {dtype} {op} n={n}"
            inp = data(case, RANK, WORLD * n, dtype).to(DEV)
            out = torch.empty(n, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(out, inp, op=op)
            full = reduce_ref([data(case, r, WORLD * n, dtype) for r in range(WORLD)], op, dtype)
            check(case, out, full[RANK * n:(RANK + 1) * n],
                  exact=op != dist.ReduceOp.AVG or WORLD in (1, 2, 4, 8))
            case = f"reduce_scatter {dtype} {op} n={n}"
            ins = [data(f"{case}/{j}", RANK, n, dtype).to(DEV) for j in range(WORLD)]
            out = torch.empty(n, dtype=dtype, device=DEV)
            dist.reduce_scatter(out, ins, op=op)
            want = reduce_ref([data(f"{case}/{RANK}", r, n, dtype) for r in range(WORLD)], op,
                              dtype)
            check(case, out, want, exact=op != dist.ReduceOp.AVG or WORLD in (1, 2, 4, 8))

# ---- all_to_all --------------------------------------------------------------------------------
for dtype in [torch.float32, torch.bfloat16, torch.int64]:
    case = f"all_to_all_single equal {dtype}"
    rows = 3
    inp = data(case, RANK, WORLD * rows * 5, dtype).view(WORLD * rows, 5).to(DEV)
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    want = torch.cat([data(case, r, WORLD * rows * 5, dtype).view(WORLD * rows, 5)
                      [RANK * rows:(RANK + 1) * rows] for r in range(WORLD)])
    check(case, out, want)


def split(src: int, dst: int) -> int:  # rows rank src sends to rank dst (some are 0)
    return (src * 3 + dst * 2) % 4


case = "all_to_all_single splits"
in_splits = [split(RANK, d) for d in range(WORLD)]
out_splits = [split(s, RANK) for s in range(WORLD)]
full = {r: data(case, r, sum(split(r, d) for d in range(WORLD)) * 2, torch.float32)
        .view(-1, 2) for r in range(WORLD)}
out = torch.empty(sum(out_splits), 2, device=DEV)
dist.all_to_all_single(out, full[RANK].to(DEV), out_splits, in_splits)
want = []
for s in range(WORLD):
    start = sum(split(s, d) for d in range(RANK))
    want.append(full[s][start:start + split(s, RANK)])
check(case, out, torch.cat(want))

case = "all_to_all list"
ins = [data(f"{case}/{RANK}->{d}", 0, d + RANK + 1, torch.float32).to(DEV) for d in range(WORLD)]
outs = [torch.empty(RANK + s + 1, device=DEV) for s in range(WORLD)]
dist.all_to_all(outs, ins)
for s in range(WORLD):
    check(f"{case} from {s}", outs[s], data(f"{case}/{s}->{RANK}", 0, RANK + s + 1, torch.float32))

# ---- gather, scatter -----------------------------------------------------------------------------
for root in sorted({0, WORLD - 1}):
    case = f"gather root={root}"
    x = data(case, RANK, 17, torch.float32).to(DEV)
    outs = [torch.empty(17, device=DEV) for _ in range(WORLD)] if RANK == root else None
    dist.gather(x, outs, dst=root)
    if RANK == root:
        for r in range(WORLD):
            check(f"{case} from {r}", outs[r], data(case, r, 17, torch.float32))
    case = f"scatter root={root}"
    ins = [data(case, r, 17, torch.int64).to(DEV) for r in range(WORLD)] if RANK == root else None
    out = torch.empty(17, dtype=torch.int64, device=DEV)
    dist.scatter(out, ins, src=root)
    check(case, out, data(case, RANK, 17, torch.int64))

# ---- send / recv ---------------------------------------------------------------------------------
if WORLD > 1:
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    for n in [1, 1000, 300000]:
        case = f"send/recv ring n={n}"
        got = torch.empty(n, device=DEV)
        # Even ranks send first, odd ranks receive first: a ring without a cycle of waits.
        if RANK % 2 == 0:
            dist.send(data(case, RANK, n, torch.float32).to(DEV), nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(data(case, RANK, n, torch.float32).to(DEV), nxt)
        check(case, got, data(case, prv, n, torch.float32))
    case = "isend/irecv batch"
    got = torch.empty(257, device=DEV)
    ops = [dist.P2POp(dist.isend, data(case, RANK, 257, torch.float32).to(DEV), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(case, got, data(case, prv, 257, torch.float32))
    # Larger than the pair's ring (HCCL_BUFFSIZE=1 MB in the test): every rank sends first, so
    # the receives must run beside the sends (the backend's receive stream).
    case = "isend/irecv batch beyond the ring"
    n = 1 << 20
    got = torch.empty(n, device=DEV)
    ops = [dist.P2POp(dist.isend, data(case, RANK, n, torch.float32).to(DEV), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(case, got * 1, data(case, prv, n, torch.float32))

# ---- a subgroup (its own communicator, made from the group's own store prefix) ---------------
sub = dist.new_group(ranks=[0, WORLD - 1])
if RANK in (0, WORLD - 1):
    y = torch.full((5,), float(RANK + 1), device=DEV)
    dist.all_reduce(y, group=sub)
    check("subgroup all_reduce", y, torch.full((5,), float(1 + WORLD)))
    out = torch.empty(2 * 3, device=DEV)
    dist.all_gather_into_tensor(out, torch.full((3,), float(RANK), device=DEV), group=sub)
    check("subgroup all_gather", out, torch.tensor([0.0] * 3 + [float(WORLD - 1)] * 3))

# ---- objects, barrier ----------------------------------------------------------------------------
objs = [None] * WORLD
dist.all_gather_object(objs, {"rank": RANK, "s": "x" * RANK})
check("all_gather_object", torch.tensor([o["rank"] for o in objs]), torch.arange(WORLD))
lst = [f"from {RANK}"]
dist.broadcast_object_list(lst, src=WORLD - 1)
check("broadcast_object_list", torch.tensor([lst[0] == f"from {WORLD - 1}"]), torch.tensor([True]))
dist.barrier()

# ---- coalescing manager --------------------------------------------------------------------------
case = "coalescing all_reduce"
xs = [data(f"{case}/{i}", RANK, 5 + i, torch.float32).to(DEV) for i in range(4)]
with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
    for x in xs:
        dist.all_reduce(x)
cm.wait()
for i, x in enumerate(xs):
    check(f"{case} {i}", x, reduce_ref([data(f"{case}/{i}", r, 5 + i, torch.float32)
                                        for r in range(WORLD)], dist.ReduceOp.SUM, torch.float32))
case = "coalescing all_gather_into_tensor"
ins = [data(f"{case}/{i}", RANK, 3 + i, torch.float32).to(DEV) for i in range(3)]
outs = [torch.empty(WORLD * (3 + i), device=DEV) for i in range(3)]
with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
    for o, x in zip(outs, ins):
        dist.all_gather_into_tensor(o, x)
cm.wait()
for i, o in enumerate(outs):
    check(f"{case} {i}", o, torch.cat([data(f"{case}/{i}", r, 3 + i, torch.float32)
                                       for r in range(WORLD)]))
case = "coalescing reduce_scatter_tensor"
ins = [data(f"{case}/{i}", RANK, WORLD * (2 + i), torch.float32).to(DEV) for i in range(3)]
outs = [torch.empty(2 + i, device=DEV) for i in range(3)]
with dist._coalescing_manager(device=DEV, async_ops=True) as cm:
    for o, x in zip(outs, ins):
        dist.reduce_scatter_tensor(o, x)
cm.wait()
for i, o in enumerate(outs):
    full = reduce_ref([data(f"{case}/{i}", r, WORLD * (2 + i), torch.float32)
                       for r in range(WORLD)], dist.ReduceOp.SUM, torch.float32)
    check(f"{case} {i}", o, full[RANK * (2 + i):(RANK + 1) * (2 + i)])

# ---- many small calls in a row, asynchronous ---------------------------------------------------
# Each add_ runs on the current stream after the previous collective (Work.wait); MAX over the
# ranks of acc + rank + 1 is acc + WORLD, so 300 rounds give exactly 300 * WORLD.
acc = torch.zeros(1, device=DEV)
for i in range(300):
    acc.add_(RANK + 1)
    dist.all_reduce(acc, op=dist.ReduceOp.MAX, async_op=True).wait()
check("300 chained small all_reduce", acc, torch.tensor([300.0 * WORLD]))
xs = [torch.full((2,), float(i + RANK), device=DEV) for i in range(200)]
works = [dist.all_reduce(x, async_op=True) for x in xs]
for w in works:
    w.wait()
check("200 queued small all_reduce", torch.stack(xs),
      torch.stack([torch.full((2,), float(WORLD * i + sum(range(WORLD)))) for i in range(200)]))

# ---- stream semantics ------------------------------------------------------------------------------
# 1. The collective waits for the current stream: a slow write queued before it is seen.
case = "waits for the current stream"
x = torch.zeros(1000, device=DEV)
torch_npu._C._npu_sleep(200)
x.fill_(RANK + 1)
dist.all_reduce(x)
check(case, x, torch.full((1000,), float(sum(range(1, WORLD + 1)))))
# 2. async_op: Work.wait() orders the current stream after the collective; compute overlaps.
case = "async overlap"
big = data(case, RANK, 2 * 1024 * 1024, torch.float32).to(DEV)
work = dist.all_reduce(big, async_op=True)
a = torch.randn(256, 256, device=DEV)
prod = a @ a  # queued on the current stream while the collective runs on the comm stream
work.wait()
doubled = big * 2
check(case, doubled, 2 * reduce_ref([data(case, r, 2 * 1024 * 1024, torch.float32)
                                     for r in range(WORLD)], dist.ReduceOp.SUM, torch.float32))
check("overlapped matmul", prod, a.cpu() @ a.cpu(), exact=False)
torch.npu.synchronize()
check("is_completed after synchronize", torch.tensor([work.is_completed()]), torch.tensor([True]))
# 3. get_future: the value is the output; a callback sees the reduced tensor.
case = "get_future"
x = data(case, RANK, 9, torch.float32).to(DEV)
fut = dist.all_reduce(x, async_op=True).get_future()
chained = fut.then(lambda f: f.value()[0] * 3)
want = reduce_ref([data(case, r, 9, torch.float32) for r in range(WORLD)], dist.ReduceOp.SUM,
                  torch.float32)
check(case, fut.wait()[0], want)
check(f"{case} then", chained.wait(), want * 3)
# 4. A collective on a side stream orders after that stream, not the default one.
case = "side stream"
s = torch.npu.Stream()
with torch.npu.stream(s):
    y = torch.full((64,), float(RANK), device=DEV)
    dist.all_reduce(y)
    z = y + 1
s.synchronize()
check(case, z, torch.full((64,), float(sum(range(WORLD)) + 1)))
# 5. record_stream: an input freed while the collective still waits for a late peer is not reused.
case = "freed input stays alive"
if WORLD > 1:
    n = 1 << 20
    inp = data(case, RANK, n, torch.float32).to(DEV)
    out = torch.empty(WORLD * n, device=DEV)
    if RANK == 1:
        time.sleep(0.5)
    w = dist.all_gather_into_tensor(out, inp, async_op=True)
    del inp
    junk = torch.full((n,), -7.0, device=DEV)  # would take inp's block if it were free
    w.wait()
    check(case, out, torch.cat([data(case, r, n, torch.float32) for r in range(WORLD)]))
    del junk

# 6. A group's collectives run in issue order wherever they run: a small one behind busy compute
#    runs on the caller's stream, and the next one, issued from an idle side stream (which would
#    otherwise run at once), still starts after it and sees its result: SUM then MAX gives the
#    sum (MAX then SUM would give WORLD * WORLD).
case = "issue order across streams"
x = torch.full((1000,), float(RANK + 1), device=DEV)
torch_npu._C._npu_sleep(200)
first = dist.all_reduce(x, async_op=True)
with torch.npu.stream(s):
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
s.synchronize()
first.wait()
check(case, x, torch.full((1000,), float(sum(range(1, WORLD + 1)))))

# ---- errors: bad input is a clear error, never a wrong result -------------------------------------
def expect(case, exc_type, text, fn):
    global checks
    checks += 1
    try:
        fn()
    except exc_type as e:
        if text not in str(e):
            failures.append(f"{case}: message lacks {text!r}: {e}")
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{case}: raised {type(e).__name__} instead of {exc_type}: {e}")
        return
    failures.append(f"{case}: no error")


base = torch.arange(16.0, device=DEV).view(4, 4)
expect("non-contiguous", ValueError, "contiguous", lambda: dist.all_reduce(base.t()))
expect("mismatched all_gather_into_tensor", ValueError, "world size",
       lambda: dist.all_gather_into_tensor(torch.empty(WORLD * 4 + 1, device=DEV),
                                           torch.ones(4, device=DEV)))
expect("mismatched reduce_scatter_tensor", ValueError, "world size",
       lambda: dist.reduce_scatter_tensor(torch.empty(3, device=DEV),
                                          torch.ones(WORLD * 3 + 2, device=DEV)))
expect("all_gather list size", ValueError, "one per rank",
       lambda: dist.all_gather([torch.empty(4, device=DEV)] * (WORLD + 1), torch.ones(4, device=DEV)))
expect("all_gather dtype", (ValueError, RuntimeError), "dtype",
       lambda: dist.all_gather([torch.empty(4, device=DEV, dtype=torch.int32)] * WORLD,
                               torch.ones(4, device=DEV)))
other = (LOCAL + 1) % torch.npu.device_count()
expect("wrong device", ValueError, f"npu:{LOCAL}",
       lambda: dist.all_reduce(torch.ones(4, device=torch.device("npu", other))))
expect("mixed devices", ValueError, "same npu device",
       lambda: dist.all_gather_into_tensor(torch.empty(WORLD * 4, device=torch.device("npu", other)),
                                           torch.ones(4, device=DEV)))
expect("bitwise op", NotImplementedError, "ReduceOp",
       lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32, device=DEV), op=dist.ReduceOp.BXOR))
expect("cpu tensor", RuntimeError, "cpu",
       lambda: dist.all_reduce(torch.ones(4)))
# The group still works after the refused calls.
x = torch.ones(3, device=DEV)
dist.all_reduce(x)
check("works after errors", x, torch.full((3,), float(WORLD)))

dist.destroy_process_group()
for f in failures:
    print(f"FAIL rank {RANK} {f}", flush=True)
print(f"rank {RANK} collectives {'ok' if not failures else 'FAILED'} {checks} checks", flush=True)
sys.exit(1 if failures else 0)
