"""Run every benchmark: python -m benchmarks"""

from benchmarks import bench_truncation

if __name__ == "__main__":
    bench_truncation.report(bench_truncation.run())
