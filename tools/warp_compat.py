"""Write docs/warp_compat.md: every public top-level name of the installed NVIDIA Warp with its
status in tapegrad.

    python tools/warp_compat.py          # needs warp-lang installed (the peer, never a dependency)

Statuses: **same** (present, semantics checked against Warp: the tests named in the note),
**different** (present, the note says how and why), **present** (the name exists with Warp's
signature; semantics not compared name by name), **missing** (belongs to an open issue, named),
**not planned** (outside tapegrad's scope, why given).
"""
from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# --- present names: what was compared, or how they differ ------------------------------------
_SAME_SURFACE = "tests/core/test_warp_surface.py"
SAME = {
    **{n: _SAME_SURFACE for n in (
        "init", "get_devices", "get_cuda_device", "is_device_available", "get_module_options",
        "pi", "e", "inf", "nan", "tau", "half_pi", "phi", "ln2", "ln10", "log2e", "log10e",
        "PI", "E", "INF", "NAN", "TAU", "HALF_PI", "PHI", "LN2", "LN10", "LOG2E", "LOG10E",
        "get_mempool_used_mem_current", "get_mempool_used_mem_high", "get_mempool_release_threshold",
        "set_mempool_release_threshold", "is_mempool_supported", "is_mempool_enabled", "set_mempool_enabled",
        "zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like", "types")},
    **{n: "tests/core/test_types.py, test_warp_surface.py (same objects / families / `_type_`...)" for n in (
        "vec2", "vec3", "vec4", "vec2f", "vec3f", "vec4f", "vec2d", "vec3d", "vec4d", "vec2h", "vec3h", "vec4h",
        "vec2i", "vec3i", "vec4i", "vec2b", "vec3b", "vec4b", "vec2ub", "vec3ub", "vec4ub", "vec2s", "vec3s",
        "vec4s", "vec2us", "vec3us", "vec4us", "vec2ui", "vec3ui", "vec4ui", "vec2l", "vec3l", "vec4l",
        "vec2ul", "vec3ul", "vec4ul", "mat22", "mat33", "mat44", "mat22f", "mat33f", "mat44f", "mat22d",
        "mat33d", "mat44d", "mat22h", "mat33h", "mat44h", "quat", "quatf", "quatd", "quath", "bool", "int8",
        "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
        "bfloat16")},
    **{n: "tests/core/test_cpu_capture.py, test_graphs.py (CPU capture as Warp 1.19)" for n in (
        "capture_begin", "capture_end", "capture_launch")},
    "dtype_to_torch": "tests/bridges/test_torch.py (uint16/32/64 -> signed twins, as Warp)",
    "dtype_to_paddle": "tests/bridges/test_paddle.py (uint16/32/64 -> signed twins, as Warp)",
    "JaxModulePreloadMode": "tests/core/test_warp_breadth.py (members as Warp's)",
    **{n: "tests/core/test_warp_breadth.py (finite differences; erf/erfc/erfinv/copysign/frac/rint against "
          "Python's math and NumPy)" for n in ("erf", "erfc", "erfinv", "erfcinv", "copysign", "frac", "rint")},
    **{n: "tests/core/test_warp_breadth.py (Warp's definitions in float64; finite differences)" for n in (
        "norm_l1", "norm_l2", "norm_huber", "norm_pseudo_huber", "smooth_normalize")},
    **{n: "tests/core/test_warp_breadth.py (skew against np.cross; argmin/argmax against NumPy, NaNs skipped)"
       for n in ("skew", "argmin", "argmax")},
    "dtype_from_torch": "tests/bridges/test_torch.py",
    "constant": "tests/core/test_types_introspection.py (NumPy scalars keep their type and get Warp's `.value`)",
    "clone": "tests/core/test_tape_features.py (final write wins: Warp's 8, not 27)",
    "copy": "tests/core/test_tape_features.py (offsets on strided views, consumption, retain_grad)",
    "from_numpy": "tests/core/test_array.py (2-D -> vector, 3-D -> matrix), retain_grad",
    **{n: "tests/lang/test_spatial.py (values from Warp 1.19; adjoints by finite differences)" for n in (
        "quat_rpy", "transform_point", "transform", "transformf", "transform_identity", "quat_from_axis_angle",
        "quat_to_matrix", "transform_to_matrix", "quat_from_matrix", "transform_from_matrix",
        "quat_between_vectors", "quat_to_rpy", "quat_slerp", "quat_from_euler", "quat_rotate_inv",
        "transform_compose", "quat_to_euler")},
    "quat_to_axis_angle": "tests/lang/test_quat_axis_angle.py (Warp's formula in float64; out-parameter and "
                          "tuple forms; adjoints by finite differences)",
    "transform_decompose": "tests/lang/test_transform_decompose.py (Warp's column-norm scale in float64; "
                           "adjoints by finite differences)",
    **{n: "tests/lang/test_transform_decompose.py (in place in kernels and Python scope; adjoints)" for n in (
        "transform_set_translation", "transform_set_rotation")},
    **{n: "tests/lang/test_linalg.py (Warp's signs and pinned values; factorizations against NumPy; adjoints by "
          "finite differences)" for n in ("svd3", "svd2", "qr3")},
    **{n: "tests/lang/test_warp_search_random_twist.py (values recorded from Warp 1.19; draws' distributions; "
          "adjoints by finite differences)" for n in (
        "lower_bound", "poisson", "quat_twist", "quat_twist_angle", "quat_twist_angle_signed", "sample_cdf",
        "transform_twist", "transform_wrench", "velocity_at_point")},
    **{n: "tests/lang/test_lang_warp_generics.py (Warp's semantics and messages: stubs, Python-scope overload "
          "resolution, generic annotations, gradients of functions, replays, C++ snippets)" for n in (
        "overload", "grad", "func_replay", "Int", "Float", "Scalar", "expect_eq", "expect_neq", "identity")},
    **{n: "tests/lang/test_warp_differential.py (same kernel source run under Warp 1.19 and tapegrad, values "
          "and adjoints bit for bit; fixes in tests/lang/test_warp_audit_semantics.py)" for n in (
        "min", "max", "clamp", "abs", "sign", "step", "acos", "asin", "sqrt", "cbrt", "exp", "log", "log2",
        "tanh", "pow", "floor", "ceil", "round", "trunc", "cross", "dot", "length", "normalize", "outer",
        "determinant", "trace", "atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_exch",
        "atomic_cas", "rand_init", "randf", "randn", "randi", "randu", "sample_unit_sphere_surface", "noise",
        "curlnoise", "quat_rotate", "quat_rotate_inv", "quat_inverse", "quat_to_matrix", "quat_from_axis_angle",
        "transform_vector", "transform_inverse", "transform_multiply", "where", "smoothstep", "atan2")},
}
DIFFERENT = {
    "inverse": "an ill-conditioned but invertible matrix is inverted (1e-13 I gives 1e13 I; Warp's 1/det "
               "underflows to inf/NaN); values otherwise within a few ulp of Warp's (tests/lang/"
               "test_warp_differential.py); see \"Where tapegrad differs\"",
    "pnoise": "below zero the lattice wraps with the floor modulo (periodic everywhere); Warp wraps with C's "
              "remainder, which is not periodic across 0; the same values for coordinates >= 0 "
              "(tests/lang/test_warp_differential.py)",
    "mod": "the gradient of a % b in b is -trunc(a/b) (Warp: 0); values as Warp (C's fmod / remainder)",
    "frac": "the gradient is 1 (frac(x) = x - trunc(x)); Warp's is 0; values as Warp (tests/lang/"
            "test_warp_breadth.py, test_warp_differential.py)",
    "func_native": "the snippets compile against tapegrad's C++ runtime (`tg::` types and functions), not "
                   "Warp's `wp::`: plain C++ on scalars is the same (tests/lang/test_lang_warp_generics.py)",
    "block_dim": "1 on the CPU as Warp; on CUDA the block size the launch really used (tapegrad keeps a "
                 "requested `block_dim` but launches with its own), tests/bridges/test_jax_warp_checks.py",
    "eig3": "eigenvalues in ascending order and Q a rotation (Warp's come in its Jacobi iteration's order); "
            "decomposes (A + A^T) / 2",
    "Tape": "`backward(grads={y: g})` copies `g` instead of adopting it (re-entrant backward, see docs/tape.md); "
            "scopes, `visualize`, structs, `backward()` and final-write-wins adjoints as Warp",
    "ScopedCapture": "thread-local capture mode by default; `stream=` is made current inside the block; "
                     "on the CPU it records and replays as Warp 1.19",
    "ScopedTimer": "wall time, `synchronize=`, `print=`, `dict=`, `detailed=`, tape scopes as Warp; "
                   "`use_nvtx`/`cuda_filter`/`report_func` accepted but produce no NVTX ranges or CUDA "
                   "activity reports; prints with `print`, not Warp's logger",
    "set_module_options": "Warp's option names are validated and stored; `enable_backward` changes "
                          "compilation (for kernels defined after the call) and `mode` (\"release\"/"
                          "\"debug\") the build of the module's next launches; the others are stored only",
    "load_module": "a `kernel.module` loads the kernels that module groups; a Python module or its name, the "
                   "kernels found in its globals (each kernel compiles into a binary of its own)",
    "force_load": "loads every kernel defined so far (each compiles into a binary of its own)",
    "clear_kernel_cache": "clears tapegrad's cache (`$TAPEGRAD_CACHE`, default `~/.cache/tapegrad`)",
    "Kernel": "`Kernel(func, key=, options=, module=)` as Warp; `kernel.module` is the `Module` the kernel's "
              "module shares (see `Module`); `kernel.module_for(device)` loads the kernel alone",
    "kernel": "`module=` / `module_options=` choose the options-table entry (`\"unique\"`: one of its own); the "
              "CUDA hints (`launch_bounds`, `cuda_max_registers`, `cluster_dim`, `grid_stride`...) are checked "
              "and kept in `kernel.options` but not applied; `entry_point_abi=\"external_constant_params\"` emits "
              "Warp's external CUDA entry (docs/kernels.md, tests/lang/test_external_entry.py); tapegrad's "
              "`cpu_grain=` sets the CPU OpenMP chunk (docs/kernels.md)",
    "Module": "one object per module name, shared by its kernels as Warp groups them (`kernel.module`): "
              "`.name`, `.options` (item assignment sets an option), `load(device)` (all its kernels, returned "
              "by key), `resolve_options`, `hash_module` (a content hash); every kernel still compiles into a "
              "binary of its own, and a kernel nothing refers to leaves its module "
              "(tests/lang/test_module_grouping.py)",
    "get_module": "the module's one `Module` object (`kernel.module` of its kernels); see `Module`",
    "ModuleBuildOptions": "include folders, preambles and dependencies reach the CPU and CUDA builds and their "
                          "cache keys (docs/kernels.md, tests/lang/test_build_options.py); paths are checked "
                          "when the instance is made (Warp: when the options are resolved)",
    "DeterministicMode": "the enum as Warp's; `RUN_TO_RUN` runs the module's CPU launches serially in grid "
                         "order (bit-identical runs; docs/kernels.md, tests/lang/test_deterministic.py), and raises "
                         "on CUDA; `GPU_TO_GPU` and a process-wide `config.deterministic` are refused",
    **{n: "tapegrad/errors.py: a `KernelError` that is also Warp's built-in base class; raised where tapegrad "
          "detects the same problem (kernel returns, unknown attributes/names, @func return types)" for n in (
        "WarpCodegenError", "WarpCodegenTypeError", "WarpCodegenAttributeError", "WarpCodegenValueError",
        "WarpCodegenIndexError", "WarpCodegenKeyError")},
    "struct": "an array field's array keeps its own gradient; Warp's private `instance._<field>_grad` reads it "
              "(tests/core/test_struct_grad_alias.py)",
    "array": "strides and shapes are int64 in the kernel ABI (Warp: int32); CUDA array interface v3; "
             "Warp's private `_ref` reads `owner` (tests/core/test_array.py)",
    **{n: "indices are checked against the data's extents on host gathers and scatters (Warp reads past the "
          "end); ints may sit next to index arrays in a key (`data[1, idx]`); host gathers and scatters are "
          "launches recorded on a tape with exact adjoints; in kernels as Warp, with exact adjoints into the "
          "data's gradient (tests/core/test_indexedarray.py, tests/lang/test_indexedarray_kernels.py)" for n in (
        "indexedarray", "indexedarray1d", "indexedarray2d", "indexedarray3d", "indexedarray4d")},
    "empty": "the memory is zero-filled (allocation is cheap; garbage is a footgun)",
    "empty_like": "zero-filled, as `empty`",
    "device_from_torch": "`torch.device('cuda')` (no index) gives the current CUDA device; Warp raises",
    "from_torch": "missing gradients are allocated by torch, not by the bridge (no lazy-allocation sync)",
    "to_torch": "uint16/32/64 arrays give torch's unsigned tensors",
    "ScopedAllocator": "tapegrad's allocator names (`'async'`, `'cupy'`, `'torch'`), see docs/graphs.md",
    "Stream": "owned streams are CuPy streams; external handles as Warp",
    "from_dlpack": "DLPack 1.x (versioned capsules, read-only flag, `byte_offset` honoured) with legacy fallback",
    "to_dlpack": "DLPack 1.x capsules when asked (`max_version`), legacy otherwise",
    "config": "`tg.config` has tapegrad's switches: `mode` (Warp's name and values; a change picks the "
              "other build at the next launch, no reload), `strict_tape`, `verbose`; other Warp settings "
              "may be set and are ignored",
}

# --- missing names: where they belong, or why not ---------------------------------------------
ITEM2 = "missing: issue 15 item 2 (transform/spatial types and builtins), not done in this session"
KLANG = "missing: kernel-language issue (builtin not in tapegrad's table yet)"
NOT_GEOMETRY = ("not planned: spatial acceleration structures (meshes, volumes, grids, BVHs) are outside "
                "tapegrad's scope")
NOT_GRAPHICS = "not planned: graphics / Omniverse interop (OpenGL, textures, Fabric)"
RULES = [
    (r"^(transform|spatial)", ITEM2),
    (r"^quat_(rpy|from_euler|from_matrix|to_matrix|to_euler|to_rpy|to_axis_angle|between_vectors|slerp|twist.*|rotate_inv)$",
     "missing: issue 15 item 2 (quaternion constructors), not done in this session"),
    (r"^(velocity_at_point)$", ITEM2),
    (r"^(Mesh|Volume|Bvh|HashGrid)|^(mesh_|volume_|hash_grid|bvh_|closest_point)", NOT_GEOMETRY),
    (r"^(Texture|GLTexture|RegisteredGLBuffer|texture_|fabric|indexedfabric|map_cuda_device|unmap_cuda_device)",
     NOT_GRAPHICS),
    (r"^(fabricarray|fabricarrayarray|indexedfabricarrayarray)$", NOT_GRAPHICS),
    (r"^fixedarray", "missing: fixed-size local arrays (arrays issue)"),
    (r"^(tile|Tile|launch_tiled|block_dim$)", "missing: tiles (kernel-language issue)"),
    (r"^WarpDeterminismError$", "missing: deterministic-mode launches"),
    (r"^(Logger|get_logger|set_logger|ScopedLogger|ScopedLogLevel|LOG_)",
     "missing: Warp's logger (tapegrad reports with `warnings` and exceptions)"),
    (r"^(TIMING_|timing_|TimingResult|ScopedCudaProfiler|cuda_profiler_)",
     "missing: CUDA activity timing and profiler ranges"),
    (r"^(capture_if|capture_while|is_conditional_graph_supported)$", "missing: conditional CUDA graph nodes"),
    (r"^(capture_save|capture_load|capture_load_from_bytes|CaptureMode)$",
     "not planned: Warp's APIC graph serialisation format"),
    (r"^capture_debug_dot_print$", "missing: tapegrad's equivalent is `Graph.debug_dot_print(path)` (a method)"),
    (r"^(compile_aot_module|load_aot_module|get_cpu_kernel_cache_key|clear_lto_cache|build_experimental|"
     r"get_cuda_kernel_properties|get_suggested_block_size|get_cuda_max_cluster_dim)$",
     "missing: ahead-of-time modules and build introspection"),
    (r"^(Allocator|CudaManagedAllocator|get_device_allocator|set_device_allocator|set_cuda_allocator)$",
     "missing: tapegrad's equivalent is `tg.set_allocator(name_or_allocator, device)` / `tg.ScopedAllocator`"),
    (r"^(ScopedMempool|ScopedMempoolAccess|is_mempool_access|set_mempool_access|ScopedPeerAccess|"
     r"is_peer_access|set_peer_access|can_access)", "missing: peer / mempool access between GPUs"),
    (r"^(from_ipc_handle|event_from_ipc_handle)$", "missing: CUDA IPC"),
    (r"^(get_cuda_driver_version|get_cuda_toolkit_version|get_cuda_supported_archs|is_cubql_available|"
     r"print_diagnostics|print_memory_report|ScopedMemoryTracker|MemoryKind|get_event_elapsed_time)$",
     "missing: runtime introspection and memory reports"),
    (r"^(Float|Int|Scalar|DeviceLike)$", "missing: typing aliases (annotations only)"),
    (r"^(Function|Launch|func_native|func_replay|grad|static|ref|handle|address|address_of|from_ptr|map|utils|"
     r"overload)$", "missing: kernel-language issue (native functions, recorded launches, static expressions)"),
]


# Differences in numbers a Warp user could meet, found by the differential audit
# (tests/lang/test_warp_differential.py runs the same kernel source under both; KNOWN there lists these)
DIFFERS_SECTION = [
    "## Where tapegrad differs",
    "",
    "`tests/lang/test_warp_differential.py` runs the same kernel source under Warp 1.19 and tapegrad on",
    "the CPU (skipped without Warp) and compares forward values and `Tape.backward` gradients bit for bit;",
    "a few linear-algebra results (`inverse`, 4x4 `determinant`, `quat_rotate`, `transform_*`, matrix",
    "products) agree to a few ulp only, the operations being rounded in another order. Everything else",
    "it covers agrees exactly: integer `//`, `%`, `/` of negative numbers, float-to-int casts (in and out",
    "of range, NaN, inf), int8/uint8/int32 wraparound, shifts and bit operations, promotion, `round`/",
    "`rint`/`floor`/`ceil`/`frac`/`trunc` on halves and -0.0, `min`/`max`/`clamp` with NaN and -0.0,",
    "`sign`/`abs`/`step`/`copysign` of -0.0, `acos`/`asin` outside [-1, 1], the random streams",
    "(`rand_init`, `randf`, `randn`, `randi`, `randu`, `poisson`, sampling), `noise`, `curlnoise`,",
    "atomics' returned old values, loops with `break`/`continue`, `while`, structs, and the gradients",
    "of the scalar builtins. Where they differ, tapegrad's number is the one below, checked against",
    "float64 finite differences or NumPy (tests/lang/test_warp_audit_semantics.py and the tests named):",
    "",
    "| kernel code | Warp 1.19 | tapegrad | why |",
    "|---|---|---|---|",
    "| `o[i] = 2*x[i]; o[i] = o[i]*x[i]` (an array element read back after a write in one thread), "
    "gradient | uses the final value of `o[i]`: 1.31 at x = 0.1 | 4x + cos x = 1.395 (for `+= sin`) | "
    "tapegrad's adjoint replays the reads; Warp's is wrong here |",
    "| assignment to a component of a local vector or matrix (`v[0] = v[0] * s`, `m[1, 1] = ...`), "
    "gradient | wrong (e.g. 8.73 where finite differences give 2.91) | as finite differences | "
    "Warp's adjoint of such a component store is wrong here |",
    "| a dynamic `for`/`while` loop with `break`, gradient | drops the body's gradient (19) | 24.53 "
    "(finite differences) | Warp's adjoint of a loop with `break` is incomplete |",
    "| `atomic_max`/`atomic_min` with tied values, gradient | every tied element gets the gradient (sum 2) "
    "| one of them does (sum 1, a subgradient) | the max moves at rate 1, not 2 |",
    "| `frac(x)`, gradient | 0 | 1 | frac(x) = x - trunc(x) |",
    "| `a % b` (floats), gradient in b | 0 | -trunc(a / b) | fmod's derivative |",
    "| `pow(x, y)` with x <= 0, gradient in y | log(x) x^y: -inf or NaN | 0 | 0^y is flat for y > 0; "
    "no real derivative for x < 0 (tapegrad gives 0, not NaN) |",
    "| `inverse(m)` of an ill-conditioned invertible matrix (1e-13 I) | inf / NaN (1/det underflows) | "
    "1e13 I | tapegrad's inverse does not form 1/det |",
    "| gradient of `inverse(m)` at an exactly singular m (Warp and tapegrad both return zeros) | "
    "its adjoint of the zero matrix | another value | no derivative exists there; neither is right |",
    "| `pnoise(state, p, ...)` with p below 0 | wraps the lattice with C's remainder | the floor modulo "
    "(periodic everywhere) | Warp's is not periodic across 0; the same values for p >= 0 |",
    "| `x // -1` and `x % -1` with x = INT_MIN (int32, int64) | the process dies (SIGFPE) | INT_MIN and 0 "
    "(two's-complement wrap) | never crash (an integer division by zero gives 0; Warp dies on it too) |",
    "",
    "Fixed by the audit (tapegrad used to differ, now gives Warp's value): `min`/`max`/`clamp` ignore a NaN",
    "operand (C's fmin/fmax; clamp(x, lo, hi) = fmin(fmax(lo, x), hi), so clamp(NaN, 0, 1) = 0 and",
    "lo > hi gives hi) and route the gradient as Warp does (ties to the second operand); `abs(-0.0)` is",
    "+0.0; `acos`/`asin` clamp their input into [-1, 1] (`acos(1.0000001)` = 0, not NaN) with no gradient",
    "where clamped or at +-1; the gradient of `atan2` at the origin is 0, not NaN; `normalize` of a zero",
    "quaternion is the identity (0, 0, 0, 1) and vectors are divided by their length (Warp's rounding);",
    "Python-scope `min`/`max`/`clamp`/`acos`/`asin`/`normalize` as in kernels, and Python-scope `round`",
    "rounds halves away from zero (it used NumPy's round-half-to-even); `fill_` of an integer array with",
    "a fractional float raises (Warp raises; it used to truncate silently).",
    "",
    "Python scope: a builtin called with Python floats (`wp.sin(1.0)`) computes in float64 in tapegrad",
    "(0.8414709848078965) and in float32 in Warp (0.8414709568023682, `float` being float32); with",
    "float32 or float64 arguments both compute in that type.",
    "",
    "tapegrad raises where Warp silently gives another number: `wp.copy` between arrays of different",
    "dtypes (Warp copies the bytes: float32 1.5 becomes int32 1069547520), `fill_`/`full` of an integer",
    "array with an out-of-range integer (Warp wraps: 300 becomes 44 in uint8) and integer division by",
    "zero or INT_MIN // -1 in kernels (Warp's CPU build dies with SIGFPE; tapegrad gives 0 and the wrap).",
    "",
    "Not differences: tapegrad accepts `x * 2` (an int literal with a float), which Warp refuses with",
    "\"Input types must be the same\"; `wp.select` (removed from Warp 1.19) is still there with Warp's old",
    "argument order (`select(cond, if_false, if_true)`); Python-scope builtins return NumPy scalars",
    "(`np.float32(2.5)`) where Warp returns Python floats (the same values).",
    "",
]


def classify(name: str, present: bool, builtins: set) -> tuple[str, str]:
    if present:
        if name in DIFFERENT:
            return "different", DIFFERENT[name]
        if name in SAME:
            return "same", SAME[name]
        return "present", "kernel builtin" if name in builtins else ""
    for pattern, note in RULES:
        if re.search(pattern, name):
            kind, _, why = note.partition(": ")
            return kind, why
    if name in builtins:
        kind, _, why = KLANG.partition(": ")
        return kind, why
    return "missing", "not yet triaged"


def main() -> int:
    import warp

    import tapegrad
    builtins = set(warp._src.context.builtin_functions)
    names = sorted(n for n in dir(warp) if not n.startswith("_"))
    ours = set(dir(tapegrad))
    rows, counts = [], {}
    for n in names:
        kind, note = classify(n, n in ours, builtins)
        counts[kind] = counts.get(kind, 0) + 1
        rows.append(f"| `{n}` | {kind} | {note} |")
    order = ["same", "different", "present", "missing", "not planned"]
    summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in order)
    present = sum(counts.get(k, 0) for k in ("same", "different", "present"))
    text = [
        "# Warp compatibility",
        "",
        f"Every public top-level name of NVIDIA Warp {warp.__version__} (`dir(warp)` without underscore",
        "names) and its status in tapegrad, so code written as `import warp as wp` can be checked before",
        "it is run as `import tapegrad as wp`. Generated by `python tools/warp_compat.py` (it imports the",
        "installed Warp; tapegrad itself never does).",
        "",
        "Statuses: **same**: present, semantics compared with Warp (the note names the tests);",
        "**different**: present, the note says how and why; **present**: the name exists with Warp's",
        "signature, semantics not compared name by name (most are kernel builtins, each checked against",
        "finite differences, not against Warp); **missing**: not yet, the note names where it belongs;",
        "**not planned**: outside tapegrad's scope.",
        "",
        "| name | status | note |",
        "|---|---|---|",
        *rows,
        "",
        "## Counts",
        "",
        f"{len(names)} names: {summary}. Present in tapegrad: {present} of {len(names)}"
        f" ({100.0 * present / len(names):.0f} %).",
        "",
        "Submodules reached as attributes (`wp.types`, `wp.utils`...) count as names; `tg.types` has",
        "the dtype helpers Warp code reads (`type_size_in_bytes`, `type_length`, `type_scalar_type`).",
        "",
        *DIFFERS_SECTION,
    ]
    out = ROOT / "docs" / "warp_compat.md"
    out.write_text("\n".join(text))
    print(f"wrote {out}: {len(names)} names, {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
