//! The leaf kernels on one block: compare-to-bitmask, bitset membership,
//! plain and masked sums.
//!
//! ```text
//! cargo bench -p quiverdb-storage --bench kernels
//! ```

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quiverdb_storage::block::{Bits, LANES, kernels};

fn bench(c: &mut Criterion) {
    let mut values = [0u64; LANES];
    for (i, v) in values.iter_mut().enumerate() {
        *v = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44;
    }
    let bitset: Vec<u64> = (0..(1u64 << 20) / 64).map(|i| i.wrapping_mul(0xDEAD_BEEF_CAFE)).collect();
    let mask = kernels::range_mask(&values, LANES, 0, 1 << 19);
    let mut group = c.benchmark_group("block kernels");
    group.throughput(Throughput::Elements(LANES as u64));
    group.bench_function("range_mask 1024 u64", |b| {
        b.iter(|| black_box(kernels::range_mask(black_box(&values), LANES, 1000, 500_000)))
    });
    group.bench_function("bitset_mask 1024 u64", |b| {
        b.iter(|| black_box(kernels::bitset_mask(black_box(&values), LANES, 0, &bitset)))
    });
    group.bench_function("sum_small 1024 u64", |b| {
        b.iter(|| black_box(kernels::sum_small(black_box(&values), 0, LANES)))
    });
    group.bench_function("masked_sum_small 1024 u64", |b| {
        b.iter(|| black_box(kernels::masked_sum_small(black_box(&values), &mask)))
    });
    group.bench_function("Bits::count", |b| b.iter(|| black_box(black_box(&mask).count())));
    let _ = Bits::EMPTY;
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
