//! Setup the integration tests share (`mod common;` in a test file).
use zero::{Communicator, Config, Engine};

/// Two engines of `cfg` side by side on `ranks` thread ranks, each engine on
/// its own set of communicators (the two never meet in a collective):
/// `body(rank, a, b)` runs on every rank's thread, and a panic on any rank
/// fails the caller.
pub fn side_by_side<F>(ranks: usize, cfg: &Config, body: F)
where
    F: Fn(usize, &mut Engine, &mut Engine) + Sync,
{
    let comms_a = Communicator::threads(ranks).unwrap();
    let comms_b = Communicator::threads(ranks).unwrap();
    std::thread::scope(|s| {
        for (rank, (ca, cb)) in comms_a.into_iter().zip(comms_b).enumerate() {
            let body = &body;
            s.spawn(move || {
                let mut a = Engine::new(cfg, &ca).unwrap();
                let mut b = Engine::new(cfg, &cb).unwrap();
                body(rank, &mut a, &mut b);
            });
        }
    });
}
