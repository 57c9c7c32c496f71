"""Every place where ProcessGroupHCCL makes a temporary from a user tensor, against gloo.

The temporaries (ProcessGroupHCCL.cpp): PREMUL_SUM's scaled copy (all_reduce,
allreduce_coalesced, reduce, reduce_scatter_tensor, reduce_scatter's packed list), the copy of
an input that overlaps its output (in-place all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single), and the packed buffers of the list forms (all_gather, all_gather_coalesced,
reduce_scatter, all_to_all, gather, scatter). Each runs here on npu tensors (hccl) and on the
same values on CPU tensors (gloo, in the same job), with inputs that start at a storage offset
inside a larger tensor, for several dtypes. Where gloo has no such collective (PREMUL_SUM), the
reference is gloo's SUM of the inputs scaled on the CPU in the factor's type.

Then the PREMUL_SUM refusals of NCCL's backend: integer tensors and a factor of a narrower type
raise TypeError on every rank, naming the dtypes, and leave the tensor untouched.
Prints "FAIL <case>: <why>" per mismatch and "rank R temporaries ok N checks" at the end.
"""
import os
import zlib

import torch
import torch.distributed as dist

import torch_npu  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
DEV = torch.device("npu", int(os.environ["LOCAL_RANK"]))
dist.init_process_group("cpu:gloo,npu:hccl")
GLOO = dist.new_group(backend="gloo")
failures: list[str] = []
checks = 0


def values(case: str, rank: int, n: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def at_offset(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` placed 5 elements into a larger tensor: a contiguous view with a storage offset."""
    base = torch.full((t.numel() + 9,), 77, dtype=t.dtype).to(device)
    view = base[5:5 + t.numel()].view(t.shape)
    view.copy_(t.to(device))
    return view


def bits(t: torch.Tensor) -> torch.Tensor:
    """The same bytes as a uint8 tensor: gloo moves them for dtypes it cannot reduce
    (bfloat16, complex), and a data-movement collective must be exact to the bit."""
    return t.view(torch.uint8)


def check(case: str, got: torch.Tensor, want: torch.Tensor) -> None:
    global checks
    checks += 1
    got, want = got.cpu(), want.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{case}: got {got.dtype} {got.flatten()[:6].tolist()}, want "
                        f"{want.dtype} {want.flatten()[:6].tolist()}")


def premul_scaled(x: torch.Tensor, factor: float) -> torch.Tensor:
    """NCCL's scaling on the CPU: the product in the factor's type, rounded once."""
    wide = torch.float32 if x.dtype in (torch.bfloat16, torch.float32) else x.dtype
    return (x.to(wide) * torch.tensor(factor, dtype=wide)).to(x.dtype)


FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
N = 12 * WORLD

# ---- PREMUL_SUM: scalar factors and tensor factors of the same or a wider-converting type ------
for dtype in FLOATS:
    factor_dtype = {torch.bfloat16: torch.float32, torch.float32: torch.float32,
                    torch.float16: torch.float16, torch.float64: torch.float64}[dtype]
    for form, factor in [("scalar", 0.5),
                         ("tensor", torch.tensor(0.5, dtype=factor_dtype)),
                         ("npu tensor", torch.tensor([0.25], dtype=factor_dtype, device=DEV)),
                         ("bf16 tensor", torch.tensor(2.0, dtype=torch.bfloat16))]:
        if form == "bf16 tensor" and dtype == torch.float16:
            continue  # bfloat16 -> half would round: refused (below)
        f = float(factor) if not isinstance(factor, float) else factor
        op = dist._make_nccl_premul_sum(factor)
        mine = values(f"premul {dtype}", RANK, N, dtype)
        scaled = [premul_scaled(values(f"premul {dtype}", r, N, dtype), f) for r in range(WORLD)]
        want = premul_scaled(mine, f)
        dist.all_reduce(want, group=GLOO)  # gloo's SUM of the scaled inputs
        case = f"all_reduce premul {form} {dtype}"
        x = at_offset(mine, DEV)
        dist.all_reduce(x, op=op)
        check(case, x, want)

        case = f"allreduce_coalesced premul {form} {dtype}"
        xs = [at_offset(mine, DEV), at_offset(mine[:5], DEV)]
        dist.all_reduce_coalesced(xs, op=op)
        check(case, xs[0], want)
        check(case + " second", xs[1], want[:5])

        case = f"reduce premul {form} {dtype}"
        x = at_offset(mine, DEV)
        dist.reduce(x, dst=WORLD - 1, op=op)
        if RANK == WORLD - 1:
            check(case, x, want)

        case = f"reduce_scatter_tensor premul {form} {dtype}"
        out = at_offset(torch.zeros(N // WORLD, dtype=dtype), DEV)
        dist.reduce_scatter_tensor(out, at_offset(mine, DEV), op=op)
        check(case, out, want.chunk(WORLD)[RANK])

        case = f"reduce_scatter list premul {form} {dtype}"
        out = at_offset(torch.zeros(N // WORLD, dtype=dtype), DEV)
        dist.reduce_scatter(out, [at_offset(c, DEV) for c in mine.chunk(WORLD)], op=op)
        check(case, out, want.chunk(WORLD)[RANK])

# ---- PREMUL_SUM refusals: TypeError on every rank, the tensor untouched --------------------------
REFUSED = [
    ("int64 data", torch.int64, 2.0, "PreMulSum Data type must be half, float, bfloat16 or double"),
    ("int32 data, tensor factor", torch.int32, torch.tensor(2.0), "PreMulSum Data type"),
    ("bool data", torch.bool, 2.0, "PreMulSum Data type"),
    ("float32 data, float64 factor", torch.float32, torch.tensor(2.0, dtype=torch.float64),
     "the PREMUL_SUM factor is a Double tensor"),
    ("float16 data, float32 factor", torch.float16, torch.tensor(2.0), "Make the factor a Half"),
    ("bfloat16 data, float64 factor", torch.bfloat16, torch.tensor(2.0, dtype=torch.float64),
     "Make the factor a Float"),
]
for name, dtype, factor, words in REFUSED:
    for collective in ("all_reduce", "reduce", "reduce_scatter_tensor"):
        case = f"{collective} premul refuses {name}"
        src = torch.tensor([1, 2, 3] * WORLD).to(dtype)
        x = src.to(DEV)
        op = dist._make_nccl_premul_sum(factor)
        try:
            if collective == "all_reduce":
                dist.all_reduce(x, op=op)
            elif collective == "reduce":
                dist.reduce(x, dst=0, op=op)
            else:
                dist.reduce_scatter_tensor(torch.zeros(3, dtype=dtype, device=DEV), x, op=op)
        except TypeError as e:
            if words not in str(e):
                failures.append(f"{case}: the TypeError does not say '{words}': {e}")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{case}: raised {type(e).__name__}, not TypeError: {e}")
        else:
            failures.append(f"{case}: no error, got {x.cpu().tolist()}")
        check(case + " (tensor untouched)", x, src)

# AVG of booleans: NCCL's TypeError.
try:
    dist.all_reduce(torch.ones(3, dtype=torch.bool, device=DEV), op=dist.ReduceOp.AVG)
    failures.append("AVG of bool: no error")
except TypeError as e:
    if "Cannot use ReduceOp.AVG with boolean inputs" not in str(e):
        failures.append(f"AVG of bool: unclear error {e}")

# ---- the other temporaries, against gloo -------------------------------------------------------
for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.complex64]:
    def mine(case, n=N, rank=RANK, dtype=dtype):
        v = values(f"{case} {dtype}", rank, n, torch.float32)
        return torch.complex(v, -v) if dtype == torch.complex64 else v.to(dtype)

    def both(fn, *tensors):
        """Runs fn on npu copies (hccl) and CPU copies (gloo) of ``tensors``, all at an offset."""
        npu = [at_offset(t, DEV) for t in tensors]
        cpu = [at_offset(t, "cpu") for t in tensors]
        fn(*npu, group=None)
        fn(*cpu, group=GLOO)
        return npu, cpu

    # In place: the input is this rank's block of the output (FSDP's all-gather).
    case = f"all_gather_into_tensor in place {dtype}"
    out_src = torch.zeros(N, dtype=dtype)
    out_src[RANK * (N // WORLD):(RANK + 1) * (N // WORLD)] = mine(case, N // WORLD)
    gathered = []
    for device, group in ((DEV, None), ("cpu", GLOO)):
        out = at_offset(out_src, device)
        target = out if group is None else bits(out)
        dist.all_gather_into_tensor(target, target.chunk(WORLD)[RANK], group=group)
        gathered.append(out)
    check(case, *gathered)

    case = f"reduce_scatter_tensor in place {dtype}"
    results = []
    for device, group in ((DEV, None), ("cpu", GLOO)):
        buf = at_offset(mine(case), device)
        if group is GLOO:  # gloo has no reduce-scatter of a tensor on every build: all_reduce
            full = buf.clone()
            dist.all_reduce(full, group=GLOO)
            results.append(full.chunk(WORLD)[RANK].clone())
        else:
            dist.reduce_scatter_tensor(buf.chunk(WORLD)[RANK], buf)
            results.append(buf.chunk(WORLD)[RANK].clone())
    check(case, results[0], results[1])

    case = f"all_to_all_single in place {dtype}"
    # The reference is gloo out of place (input and output sharing memory is hccl's case).
    npu, cpu = both(lambda t, group: dist.all_to_all_single(
        *((t, t) if group is None else (bits(t), bits(t).clone())), group=group), mine(case))
    check(case, npu[0], cpu[0])

    case = f"all_gather list {dtype}"
    src = mine(case, 7)
    outs_npu = [at_offset(torch.zeros(7, dtype=dtype), DEV) for _ in range(WORLD)]
    outs_cpu = [at_offset(torch.zeros(7, dtype=dtype), "cpu") for _ in range(WORLD)]
    dist.all_gather(outs_npu, at_offset(src, DEV))
    dist.all_gather([bits(t) for t in outs_cpu], bits(at_offset(src, "cpu")), group=GLOO)
    for r in range(WORLD):
        check(f"{case} [{r}]", outs_npu[r], outs_cpu[r])

    case = f"all_gather_coalesced {dtype}"
    srcs = [mine(case, 5), mine(case + "b", 3)]
    lists_npu = [[at_offset(torch.zeros_like(s), DEV) for s in srcs] for _ in range(WORLD)]
    dist.all_gather_coalesced(lists_npu, [at_offset(s, DEV) for s in srcs])
    for r in range(WORLD):
        for i, s in enumerate(srcs):  # gloo's allgather_coalesced wants equal dtypes: compose
            ref = [torch.zeros_like(s) for _ in range(WORLD)]
            dist.all_gather([bits(t) for t in ref], bits(s), group=GLOO)
            check(f"{case} [{r}][{i}]", lists_npu[r][i], ref[r])

    case = f"reduce_scatter list {dtype}"
    if dtype != torch.complex64:
        full = mine(case)
        out = at_offset(torch.zeros(N // WORLD, dtype=dtype), DEV)
        dist.reduce_scatter(out, [at_offset(c, DEV) for c in full.chunk(WORLD)])
        ref = full.clone()
        dist.all_reduce(ref, group=GLOO)
        check(case, out, ref.chunk(WORLD)[RANK])

    case = f"all_to_all list {dtype}"
    ins = [mine(f"{case} {r}", 4) for r in range(WORLD)]
    outs_npu = [at_offset(torch.zeros(4, dtype=dtype), DEV) for _ in range(WORLD)]
    outs_cpu = [at_offset(torch.zeros(4, dtype=dtype), "cpu") for _ in range(WORLD)]
    dist.all_to_all(outs_npu, [at_offset(t, DEV) for t in ins])
    dist.all_to_all([bits(t) for t in outs_cpu], [bits(at_offset(t, "cpu")) for t in ins],
                    group=GLOO)
    for r in range(WORLD):
        check(f"{case} [{r}]", outs_npu[r], outs_cpu[r])

    case = f"gather {dtype}"
    src = mine(case, 6)
    root = WORLD - 1
    gl_npu = [at_offset(torch.zeros(6, dtype=dtype), DEV) for _ in range(WORLD)] \
        if RANK == root else None
    gl_cpu = [at_offset(torch.zeros(6, dtype=dtype), "cpu") for _ in range(WORLD)] \
        if RANK == root else None
    dist.gather(at_offset(src, DEV), gl_npu, dst=root)
    dist.gather(bits(at_offset(src, "cpu")), [bits(t) for t in gl_cpu] if gl_cpu else None,
                dst=root, group=GLOO)
    if RANK == root:
        for r in range(WORLD):
            check(f"{case} [{r}]", gl_npu[r], gl_cpu[r])

    case = f"scatter {dtype}"
    chunks = [mine(f"{case} {r}", 6, rank=0) for r in range(WORLD)]
    out_npu = at_offset(torch.zeros(6, dtype=dtype), DEV)
    out_cpu = at_offset(torch.zeros(6, dtype=dtype), "cpu")
    dist.scatter(out_npu, [at_offset(c, DEV) for c in chunks] if RANK == 0 else None, src=0)
    dist.scatter(bits(out_cpu), [bits(at_offset(c, "cpu")) for c in chunks] if RANK == 0
                 else None, src=0, group=GLOO)
    check(case, out_npu, out_cpu)

torch.npu.synchronize()
dist.barrier()
for f in failures:
    print(f"FAIL rank {RANK} {f}", flush=True)
if not failures:
    print(f"rank {RANK} temporaries ok {checks} checks", flush=True)
dist.destroy_process_group()
