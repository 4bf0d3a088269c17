"""Run every optimizer showcase whose framework is installed."""
import importlib
import importlib.util

SHOWCASES = [
    ("fit_curve", None, "tapegrad kernel + generated adjoint + Adam on tapegrad arrays"),
    ("torch_adam", "torch", "tapegrad parameters stepped by torch.optim.Adam (zero-copy grads)"),
]


def main():
    for name, needs, what in SHOWCASES:
        if needs and importlib.util.find_spec(needs) is None:
            print(f"[skip] {name}: needs {needs}")
            continue
        if importlib.util.find_spec(f"optim_examples.{name}") is None:
            continue
        print(f"[run] {name}: {what}")
        importlib.import_module(f"optim_examples.{name}").main()


if __name__ == "__main__":
    main()
