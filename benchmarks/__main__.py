"""Run every benchmark: python -m benchmarks"""

from benchmarks import bench_pipeline, bench_truncation

if __name__ == "__main__":
    bench_truncation.report(bench_truncation.run())
    bench_pipeline.report(bench_pipeline.run())
