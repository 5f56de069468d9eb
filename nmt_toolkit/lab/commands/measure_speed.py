"""Time every family member's decoding and training against MarianMTModel (and CTranslate2): prints
a table, writes JSON. Named `dwlstm-benchmark` before; that name still runs it.

    dwlstm-measure-speed                    # small and base, lengths 16/64/256, 3 repeats
    dwlstm-measure-speed --quick            # small only, lengths 16/64, 2 repeats
    dwlstm-measure-speed --compile          # the family under torch.compile
    dwlstm-measure-speed --compile_decoding # the family's decoding steps compiled
    dwlstm-measure-speed --deployment       # base, every precision, bf16 training, CTranslate2, the shortlist,
                                            # the int8 GEMM profile, the 12+12 vs 24+24 pair, the
                                            speed targets
    dwlstm-measure-speed --show experiments/speed/records/avx2.json avx2-run19   # a kept run's tables

Paths this CPU refuses to users (bfloat16 decoding and bf16 training without native bfloat16, int8
without a fast kernel) are listed as refused, with the reason, but not timed: without native
bfloat16 they take longer than all the rest. --measure_refused times them too.
"""  # noqa: E501

import argparse

from nmt_toolkit.arguments import positive_int
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.lab.speed import (
    PRECISIONS,
    BenchmarkSettings,
    NotEnoughMemory,
    format_report,
    kept_report,
    run_benchmark,
    write_report,
)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small size, lengths 16 and 64, 2 repeats, no memory probe",
    )
    parser.add_argument("--sizes", nargs="+", choices=["small", "base"])
    parser.add_argument(
        "--members",
        nargs="+",
        help="family members to run (default: every registered one) and/or 'marian'",
    )
    parser.add_argument(
        "--lengths", nargs="+", type=positive_int, help="training lengths (default 16 64 256)"
    )
    parser.add_argument(
        "--headline_length",
        type=positive_int,
        help="training length the targets are checked at (default 64)",
    )
    parser.add_argument("--repeats", type=positive_int)
    parser.add_argument(
        "--generation_batch",
        type=positive_int,
        help="source sentences per generate() call (default 32)",
    )
    parser.add_argument(
        "--new_tokens", type=positive_int, help="forced new tokens per sentence (default 24)"
    )
    parser.add_argument("--threads", type=positive_int, default=2, help="CPU threads (default 2)")
    parser.add_argument(
        "--token_budget",
        type=positive_int,
        help="source + target tokens per training batch (default 4096)",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the family's models")
    parser.add_argument(
        "--compile_decoding",
        action="store_true",
        help=(
            "the family's generate() with compile_decoding=True (compiled decoding steps; the "
            "first decodes compile, in the warm-up)"
        ),
    )
    parser.add_argument("--no_memory", action="store_true", help="skip the peak-memory probes")
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=list(PRECISIONS),
        help="generation precisions (default float32; float32 is always measured)",
    )
    parser.add_argument(
        "--bf16_training",
        action="store_true",
        help="also time training under bf16 autocast (--bf16)",
    )
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="CTranslate2 rows: Marian and the residual pre-norm export",
    )
    parser.add_argument(
        "--shortlist",
        action="store_true",
        help=(
            "also decode with a vocabulary shortlist: our members (use_shortlist) and "
            "CTranslate2 (use_vmap)"
        ),
    )
    parser.add_argument(
        "--gemm_share",
        action="store_true",
        help=(
            "profile the depth-wise LSTM's int8 beam-4 decoding: its share in int8 matrix products"
        ),
    )
    parser.add_argument(
        "--depth_pair",
        action="store_true",
        help="Xu et al. 2024, Table 6: 12+12 depth-wise LSTM vs 24+24 residual",
    )
    parser.add_argument(
        "--deployment",
        action="store_true",
        help="the deployment run: base size, length 64, every precision, --bf16_training, "
        "--ctranslate2, --shortlist, --gemm_share, --depth_pair, no memory probe; the paths "
        "this CPU refuses to users are listed as refused, not timed (see --measure_refused)",
    )
    parser.add_argument(
        "--measure_refused",
        action="store_true",
        help="also time the paths this CPU refuses to users (bfloat16 without native bfloat16, "
        "int8 without a fast kernel), to see how slow they are; they are slow to time too",
    )
    parser.add_argument(
        "--keep_freed_memory",
        action="store_true",
        help="tell glibc's allocator to keep freed memory for the whole run, every row "
        "(nmt_toolkit.allocator.keep_freed_memory)",
    )
    parser.add_argument(
        "--skip_memory_check",
        action="store_true",
        help="run even where the run's rows need more memory than the machine has available "
        "(it is then likely to be killed part way)",
    )
    parser.add_argument(
        "--output", default="speed.json", help="JSON report path (default speed.json)"
    )
    parser.add_argument(
        "--show",
        nargs=2,
        metavar=("RECORDS", "RUN"),
        help="Measure nothing: print the tables of run RUN kept in RECORDS "
        "(experiments/speed/records/CLASS.json).",
    )
    args = parser.parse_args(argv)
    if args.show:
        report = kept_report(*args.show)
        kept = report["kept"]
        print(
            f"{args.show[1]}: code {kept['code']}, {kept['date']} {kept['when']}\n    "
            f"{kept['command']}\n"
        )
        print(format_report(report))
        return
    settings = BenchmarkSettings(
        threads=args.threads,
        compile=args.compile,
        compile_decoding=args.compile_decoding,
        measure_memory=not args.no_memory,
        train_bf16=args.bf16_training,
        ctranslate2=args.ctranslate2,
        depth_pair=args.depth_pair,
        shortlist=args.shortlist,
        gemm_share=args.gemm_share,
        measure_refused=args.measure_refused,
        keep_freed_memory=args.keep_freed_memory,
        memory_check=not args.skip_memory_check,
    )
    if args.quick:
        settings.sizes, settings.lengths, settings.repeats, settings.measure_memory = (
            ("small",),
            (16, 64),
            2,
            False,
        )
    if args.deployment:
        settings.sizes, settings.lengths, settings.measure_memory, settings.precisions = (
            ("base",),
            (64,),
            False,
            tuple(PRECISIONS),
        )
        settings.train_bf16 = settings.ctranslate2 = settings.depth_pair = settings.shortlist = (
            settings.gemm_share
        ) = True
    if args.precisions:
        settings.precisions = tuple(dict.fromkeys(["float32", *args.precisions]))
    for name in (
        "sizes",
        "members",
        "lengths",
        "headline_length",
        "repeats",
        "token_budget",
        "generation_batch",
        "new_tokens",
    ):
        if getattr(args, name) is not None:
            setattr(
                settings,
                name,
                tuple(getattr(args, name))
                if isinstance(getattr(args, name), list)
                else getattr(args, name),
            )
    report = run_benchmark(settings)
    print(format_report(report))
    write_report(report, args.output)
    print(f"\nWrote {args.output}")


def run():
    exit_on_error(main, also=(NotEnoughMemory,))


if __name__ == "__main__":
    run()
