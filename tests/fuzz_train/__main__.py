"""``python -m tests.fuzz_train --n N --seed S --jobs J --backend eager|aot_eager|inductor
[--ranks 1|2] [--out DIR]``: a campaign of random training loops, each compared with the
same loop run eagerly after every step.  ``--show SEED`` prints a loop's source;
``--run SEED`` runs one loop and prints its outcome."""
import argparse

from tests.fuzz_train.campaign import campaign
from tests.fuzz_train.generator import generate
from tests.fuzz_train.runner import FAILURES, run


def main(argv=None) -> int:
    """Run the campaign; exit status 1 where any loop was wrong, crashed or hung."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz_train", description=__doc__)
    parser.add_argument("--n", type=int, default=100, help="loops to run")
    parser.add_argument("--seed", type=int, default=0, help="first loop seed")
    parser.add_argument("--jobs", type=int, default=1, help="loops run at once (each in its own workers)")
    parser.add_argument("--backend", default="eager", help="eager (bit for bit), aot_eager, inductor, ...; "
                        "none: eager against eager (checks the generator)")
    parser.add_argument("--ranks", type=int, default=1, choices=(1, 2),
                        help="ranks for DDP and FSDP2 loops (plain loops always run on one)")
    parser.add_argument("--out", default=None, help="folder for the repro files and summary.txt")
    parser.add_argument("--minutes", type=float, default=None, help="stop starting loops after this long")
    parser.add_argument("--minimize-s", type=float, default=60.0, help="seconds to simplify each repro")
    parser.add_argument("--vs-torch-compile", action="store_true",
                        help="non-eager backends: where magpy is out of tolerance, run torch.compile the "
                             "same way; as far from eager: drift, not wrong")
    parser.add_argument("--show", type=int, default=None, metavar="SEED", help="print a loop's source")
    parser.add_argument("--run", type=int, default=None, metavar="SEED",
                        help="run one loop, print the outcome")
    args = parser.parse_args(argv)
    if args.show is not None:
        print(generate(args.show).source())
        return 0
    if args.run is not None:
        loop = generate(args.run)
        print(loop.describe())
        outcome = run(loop, args.backend, args.ranks, vs_torch_compile=args.vs_torch_compile)
        print(outcome.describe())
        return int(outcome.kind in FAILURES)
    result = campaign(args.n, args.seed, args.jobs, args.backend, args.ranks, args.out, args.minimize_s,
                      args.minutes, args.vs_torch_compile)
    return int(any(result["counts"][k] for k in FAILURES))


if __name__ == "__main__":
    raise SystemExit(main())
