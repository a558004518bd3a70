//! `Engine::gather_into_many` (C ABI 1.15): a block's params in one call
//! equal one `gather_into` per param bit for bit on 3 thread ranks (uneven
//! shards), trained side by side at stage 3; a bad entry in the middle names
//! the entry and gathers nothing; buffers of two dtypes or a param twice are
//! refused before the call; the guard releases every gather when dropped.
mod common;

use zero::{Communicator, Config, Engine, ParamData, ParamDataMut, ParamDesc, ParamId, Status};

fn config() -> Config {
    Config::from_json(
        r#"{"steps_per_print": 0, "optimizer": {"type": "AdamW", "params": {"lr": 0.05}},
            "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 20}}"#,
    )
    .unwrap()
}

const SHAPES: [&[usize]; 4] = [&[7, 11], &[13], &[5, 9], &[31]];

fn register(e: &mut Engine) -> Vec<ParamId> {
    let ids = SHAPES
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            let init: Vec<f32> = (0..n)
                .map(|i| ((i * 37 + k * 11) % 101) as f32 / 64.0 - 0.8)
                .collect();
            e.register_param(ParamDesc::new(&format!("p{k}"), s).init(&init))
                .unwrap()
        })
        .collect();
    e.finalize().unwrap();
    ids
}

fn numel(k: usize) -> usize {
    SHAPES[k].iter().product::<usize>()
}

#[test]
fn gather_into_many_equals_gather_into_on_three_ranks() {
    common::side_by_side(3, &config(), |rank, a, b| {
        let ia = register(a);
        let ib = register(b);
        for t in 0..3 {
            // Entries in the caller's order: the last param first.
            let order = [3usize, 0, 2, 1];
            let mut bufs_a: Vec<Vec<f32>> = order.iter().map(|&k| vec![0.0; numel(k)]).collect();
            let mut bufs_b = bufs_a.clone();
            {
                let guards: Vec<_> = order
                    .iter()
                    .zip(bufs_a.iter_mut())
                    .map(|(&k, buf)| a.gather_into(ia[k], ParamDataMut::F32(buf)).unwrap())
                    .collect();
                let entries = order
                    .iter()
                    .zip(bufs_b.iter_mut())
                    .map(|(&k, buf)| (ib[k], ParamDataMut::F32(buf)))
                    .collect();
                let many = b.gather_into_many(entries).unwrap();
                assert_eq!(many.len(), 4);
                for (j, g) in guards.iter().enumerate() {
                    assert_eq!(many.id(j), ib[order[j]]);
                    match (g.data(), many.data(j)) {
                        (ParamData::F32(x), ParamData::F32(y)) => {
                            assert_eq!(x, y, "rank {rank} step {t} entry {j}")
                        }
                        _ => panic!("fp32 params"),
                    }
                }
                many.release().unwrap();
            }
            for k in 0..4 {
                let g: Vec<f32> = (0..numel(k))
                    .map(|i| ((i * 13 + t * 7 + rank * 3) % 17) as f32 / 32.0 - 0.25)
                    .collect();
                a.set_grad(ia[k], &g).unwrap();
                b.set_grad(ib[k], &g).unwrap();
            }
            a.step().unwrap();
            b.step().unwrap();
        }
        for k in 0..4 {
            assert_eq!(a.master(ia[k]).unwrap(), b.master(ib[k]).unwrap(), "p{k}");
        }
    });
}

#[test]
fn refusals_gather_nothing() {
    let comm = Communicator::new_self().unwrap();
    let mut e = Engine::new(&config(), &comm).unwrap();
    let ids = register(&mut e);
    let mut b0 = vec![0f32; numel(0)];
    let mut b2 = vec![0f32; numel(2) + 1]; // a wrong size in the middle
    let mut b3 = vec![0f32; numel(3)];
    let err = e
        .gather_into_many(vec![
            (ids[0], ParamDataMut::F32(&mut b0)),
            (ids[2], ParamDataMut::F32(&mut b2)),
            (ids[3], ParamDataMut::F32(&mut b3)),
        ])
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("gather_into_many, entry 1") && err.message().contains("'p2'"),
        "{}",
        err.message()
    );
    assert_eq!(e.stats().unwrap().live_gathered_bytes, 0);
    // Two dtypes, or a param twice: refused before the call.
    let mut h = vec![0u16; numel(1)];
    let err = e
        .gather_into_many(vec![
            (ids[0], ParamDataMut::F32(&mut b0)),
            (ids[1], ParamDataMut::BF16(&mut h)),
        ])
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let mut b0b = vec![0f32; numel(0)];
    let err = e
        .gather_into_many(vec![
            (ids[0], ParamDataMut::F32(&mut b0)),
            (ids[0], ParamDataMut::F32(&mut b0b)),
        ])
        .unwrap_err();
    assert_eq!(err.status(), Status::FailedPrecondition);
    // An empty list; then a held block released by the guard's drop.
    assert!(e.gather_into_many(Vec::new()).unwrap().is_empty());
    {
        let _held = e
            .gather_into_many(vec![
                (ids[0], ParamDataMut::F32(&mut b0)),
                (ids[3], ParamDataMut::F32(&mut b3)),
            ])
            .unwrap();
        assert_eq!(
            e.stats().unwrap().live_gathered_bytes,
            (numel(0) * 4) as i64 + (numel(3) * 4) as i64
        );
    }
    assert_eq!(e.stats().unwrap().live_gathered_bytes, 0);
}
