"""Run every benchmark: python -m benchmarks (or make bench)."""

from benchmarks import (
    bench_bounded,
    bench_catalog,
    bench_fallback,
    bench_figures,
    bench_floor,
    bench_hosts,
    bench_llm,
    bench_pacing,
    bench_pipeline,
    bench_policies,
    bench_preflight,
    bench_render,
    bench_report,
    bench_retrieval_real,
    bench_sign_in,
    bench_slack,
    bench_takeover,
    bench_text,
    bench_truncation,
    bench_web,
    bench_workers,
)

if __name__ == "__main__":
    bench_truncation.report(bench_truncation.run())
    bench_text.report(bench_text.run())
    bench_render.report(bench_render.run())
    bench_llm.report(bench_llm.run())
    bench_fallback.report(bench_fallback.run())
    bench_pipeline.report(bench_pipeline.run())
    bench_report.report(bench_report.run())
    bench_web.report(bench_web.run())
    bench_slack.report(bench_slack.run())
    bench_pacing.report(bench_pacing.run())
    bench_workers.report(bench_workers.run())
    bench_hosts.report(bench_hosts.run())
    bench_floor.report(bench_floor.run())
    bench_bounded.report(bench_bounded.run())
    bench_catalog.report(bench_catalog.run())
    bench_retrieval_real.report(bench_retrieval_real.run())
    bench_figures.report(bench_figures.run())
    bench_preflight.report(bench_preflight.run())
    bench_policies.report(bench_policies.run())
    bench_sign_in.report(bench_sign_in.run())
    bench_takeover.report(bench_takeover.run())
