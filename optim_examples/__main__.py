"""The showcase: ``python -m optim_examples`` runs the declarer-by-optimizer matrix (parameters
declared in tapegrad, torch, paddle or JAX x torch Adam, paddle Adam, optax, tg.optim.Adam),
prints its table and writes a convergence plot; ``python -m optim_examples NAME`` runs one
example; ``--help`` lists them. Pairs whose framework is missing are skipped with a one-line
reason; the exit status is non-zero when a pair that ran did not converge.
"""
import argparse
import importlib
import importlib.util
import sys

# name -> (frameworks it needs, what it shows)
EXAMPLES = {
    "matrix": ((), "the 16 pairs: declared in tapegrad/torch/paddle/jax x torch/paddle/optax/tg.optim Adam"),
    "native_adam": ((), "tapegrad parameters, tapegrad's fused tg.optim.Adam"),
    "fit_curve": ((), "a curve fit: kernel + generated adjoint + tg.optim.Adam"),
    "torch_adam": (("torch",), "tapegrad parameters stepped by torch.optim.Adam (to_torch, shared grads)"),
    "torch_params": (("torch",), "torch parameters, a tapegrad loss kernel, torch.optim.Adam (from_torch)"),
    "rosenbrock_function": (("torch",), "a kernel inside a hand-written torch.autograd.Function"),
    "torch_compile": (("torch",), "tg.torch_op: a kernel as a custom op under torch.compile(fullgraph=True)"),
    "paddle_adam": (("paddle",), "tapegrad parameters stepped by paddle.optimizer.Adam (to_paddle)"),
    "paddle_params": (("paddle",), "paddle parameters, a tapegrad loss kernel, paddle Adam (from_paddle)"),
    "paddle_layer": (("paddle",), "tg.paddle_op: a kernel as a paddle PyLayer"),
    "optax_adam": (("jax", "optax"), "tapegrad parameters stepped by optax (tg.optax_optimizer)"),
    "jax_grad": (("jax", "optax"), "JAX parameters, tg.jax_kernel + jax.grad + optax in one jit"),
}


def missing(name):
    return [m for m in EXAMPLES[name][0] if importlib.util.find_spec(m) is None]


def main(argv=None):
    listing = "\n".join(f"  {n:<20} {what}" for n, (_, what) in EXAMPLES.items())
    ap = argparse.ArgumentParser(prog="python -m optim_examples", description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n" + listing, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?", default="matrix", choices=sorted(EXAMPLES), metavar="NAME",
                    help="the example to run (default: matrix)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the example's own)")
    ap.add_argument("--device", default="cpu", help="tapegrad device, e.g. cpu or cuda:0 (default: cpu)")
    ap.add_argument("--plot", default="optim_matrix.png", help="where the matrix writes its convergence plot")
    args = ap.parse_args(argv)
    from optim_examples.common import quiet_third_party
    quiet_third_party()
    lack = missing(args.name)
    if lack:
        print(f"[skip] {args.name}: needs {', '.join(lack)}")
        return 0
    module = importlib.import_module(f"optim_examples.{args.name}")
    kw = {"device": args.device}
    if args.steps is not None:
        kw["steps"] = args.steps
    if args.name == "matrix":
        results = module.main(plot_path=args.plot, **kw)
        bad = [f"{r.declared_in} x {r.optimizer}" for r in results if not r.converged]
        if bad:
            print(f"did not converge: {', '.join(bad)}")
            return 1
        return 0
    print(f"[run] {args.name}: {EXAMPLES[args.name][1]}")
    module.main(**kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
