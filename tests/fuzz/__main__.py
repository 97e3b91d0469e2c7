"""``python -m tests.fuzz --n 10000 [--seed S] [--jobs J] [--out DIR] [--backend B]``: a fuzz
campaign against magpy with the user's defaults and backend eager (results compared bit for
bit), or with another backend (``--backend inductor``: compiles in the foreground, autopilot
off, floats compared within a tolerance)."""
import argparse

from tests.fuzz.campaign import campaign
from tests.fuzz.generator import PROFILES


def main(argv=None) -> int:
    """Run the campaign; exit status 1 where any program failed."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="programs to run")
    parser.add_argument("--seed", type=int, default=0, help="first program seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--out", default=None, help="folder for the repro files and summary.txt")
    parser.add_argument("--profile", default="default", choices=sorted(PROFILES),
                        help="the generator's profile (nonneg: no negative ints, issue 33 E)")
    parser.add_argument("--backend", default="eager", help="magpy's backend (eager: exact comparison)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--minimize-s", type=float, default=60.0, help="seconds to shrink each repro")
    args = parser.parse_args(argv)
    result = campaign(args.n, args.seed, args.jobs, args.out, args.minimize_s, args.profile, args.minutes,
                      backend=args.backend)
    return int(any(result["counts"][k] for k in ("wrong", "crash", "raise-mismatch", "hang")))


if __name__ == "__main__":
    raise SystemExit(main())
