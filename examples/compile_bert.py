"""magpy.compile on a transformers BertModel (random weights from a small config).

    python examples/compile_bert.py [--backend inductor]

Compiles the model, checks the compiled output against eager on the first call (the
recording run), a repeated call (which starts the backend's compile in the background, while
the call runs the graph eagerly) and, once the compile is done, new inputs; prints what magpy
recorded, and times eager, torch.compile and magpy with the same backend.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import BertConfig, BertModel

import magpy


def median_ms(fn, *args, repeat=20, **kwargs) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    opts = parser.parse_args()

    torch.manual_seed(0)
    # transformers' defaults (SDPA attention), as users build it.
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    model = BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 128))
    mask = torch.ones_like(ids)

    compiled = magpy.compile(model, backend=opts.backend, fullgraph=True)
    with torch.no_grad():
        t0 = time.perf_counter()
        out = compiled(input_ids=ids, attention_mask=mask)
        print(f"first call (records; runs the graph eagerly): {time.perf_counter() - t0:.1f} s")
        for what, kwargs in [("first call", dict(input_ids=ids, attention_mask=mask)),
                             ("repeated call", dict(input_ids=ids, attention_mask=mask)),
                             ("new inputs", dict(input_ids=torch.randint(0, config.vocab_size, (1, 128)),
                                                 attention_mask=mask))]:
            got = out if what == "first call" else compiled(**kwargs)
            if what == "repeated call":   # its guard hit started the compile in the background
                t0 = time.perf_counter()
                magpy.synchronize()
                print(f"waited {time.perf_counter() - t0:.1f} s for the {opts.backend!r} compile")
            want = model(**kwargs)
            ok = torch.allclose(got.last_hidden_state, want.last_hidden_state, atol=1e-4, rtol=1e-4)
            print(f"{what:14s} matches eager: {ok}  ({type(got).__name__})")
        print(magpy.stats(compiled))

        tc = torch.compile(model, backend=opts.backend)
        tc(input_ids=ids, attention_mask=mask)
        for name, fn in [("eager", model), ("torch.compile", tc), ("magpy", compiled)]:
            for _ in range(magpy.backends.autopilot.TRIAL_CALLS):   # (magpy's trial of compiled vs eager)
                fn(input_ids=ids, attention_mask=mask)
            print(f"{name:14s} {median_ms(fn, input_ids=ids, attention_mask=mask):7.2f} ms per call")


if __name__ == "__main__":
    main()
