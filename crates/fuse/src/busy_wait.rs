//! Whether the daemon busy-waits for requests: keep-awake spinners (`keep_awake`) and ring
//! threads following a lone caller (vendor/fuser's `ring_follow.rs`). Both spend CPU time
//! to spare a caller the wake-up of a halted CPU, so both pay only where that wake-up is
//! slow. On the 2-core development VM (idle vCPUs halt at once; a cross-CPU wake-up costs
//! 15-30 µs) they halved `tar x`; on a 16-core guest whose idle CPUs poll 200 µs before
//! halting they made round trips slower (getxattr 9.4 µs against 7.0 µs without) and spent
//! about 13 CPUs per fsync'd file (issue 32).
//!
//! Decided once, at mount, from what the machine says: the cpuidle governor and its idle
//! states, else a measured wake-up; the mount options `spin=` and `follow=` override. This
//! is the one home of that decision and of its reason, which `shoal stats` shows.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::keep_awake::{online_cpus, pin_to_cpu};

/// How long spinners go on after the last request, where they run and `spin=` is not given.
pub const SPIN_WINDOW: Duration = Duration::from_millis(2);
/// Idle CPUs that poll at least this long before halting wake fast enough for the gaps
/// between a busy tool's requests (tens of microseconds): nothing to gain from spinning.
const ENOUGH_IDLE_POLL: Duration = Duration::from_micros(50);
/// A cross-CPU wake-up slower than this is worth busy-waiting to avoid (a FUSE round trip
/// costs 7-12 µs in all; the 2-core VM's halted vCPUs take 15-30 µs to wake).
const SLOW_WAKE: Duration = Duration::from_micros(10);
/// The measured wake-up: rounds per CPU pair and the idle gap before each, about the gap
/// between two requests of a tool that waits on each. The lower quartile counts, and the
/// least over up to four pairs (`sleeper_cpus`): other work can only lengthen a wake-up (a
/// sleeper CPU busy with another program, the host's own scheduling). With the median of
/// one pair, a 16-core guest whose idle CPUs woke in 6.2 µs spun at some mounts of one
/// benchmark run and not at others (16 spinners, 0.4 ms of spinning per `tar x` entry);
/// with two pairs, still at the mount made right after `mkfs.xfs` and `mkfs.ext4`.
const WAKE_ROUNDS: usize = 32;
const WAKE_IDLE_GAP: Duration = Duration::from_micros(100);
/// A wake-up not seen within this is counted as this long (a busy or lost CPU).
const WAKE_GIVE_UP: Duration = Duration::from_millis(20);

const CPUIDLE: &str = "/sys/devices/system/cpu/cpuidle";
const CPU0_IDLE_STATES: &str = "/sys/devices/system/cpu/cpu0/cpuidle";
const HALTPOLL_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// What the mount options ask for; `None`: the machine decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusyWaitAsked {
    /// `spin=MICROSECONDS` (0: no spinners).
    pub spin_window: Option<Duration>,
    /// `follow=on|off`.
    pub follow: Option<bool>,
}

/// The busy-waiting a mount does, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusyWait {
    /// How long spinners go on after the last request; zero: no spinners.
    pub spin_window: Duration,
    /// Ring threads follow a lone caller (with io_uring, 2+ CPUs and root).
    pub follow: bool,
    /// One line: what decided it (the options, or what the machine said).
    pub reason: String,
}

impl BusyWait {
    /// Decides from `asked`, and from the machine for whatever `asked` leaves open.
    pub fn decide(asked: BusyWaitAsked) -> Self {
        let machine = match asked {
            BusyWaitAsked {
                spin_window: Some(_),
                follow: Some(_),
            } => None,
            _ => Some(IdleExit::probe()),
        };
        Self::from_parts(asked, machine.as_ref())
    }

    /// No busy-waiting at all (tests, library mounts that want none).
    pub fn off(reason: &str) -> Self {
        BusyWait {
            spin_window: Duration::ZERO,
            follow: false,
            reason: reason.to_string(),
        }
    }

    fn from_parts(asked: BusyWaitAsked, machine: Option<&IdleExit>) -> Self {
        let slow = machine.is_some_and(IdleExit::slow);
        let spin_window =
            asked
                .spin_window
                .unwrap_or(if slow { SPIN_WINDOW } else { Duration::ZERO });
        let follow = asked.follow.unwrap_or(slow);
        let given: Vec<&str> = [
            asked.spin_window.map(|_| "spin="),
            asked.follow.map(|_| "follow="),
        ]
        .into_iter()
        .flatten()
        .collect();
        let reason = match (machine, given.is_empty()) {
            (None, _) => "spin= and follow= given".to_string(),
            (Some(machine), true) => machine.to_string(),
            (Some(machine), false) => format!("{} given; otherwise: {machine}", given.join(" ")),
        };
        BusyWait {
            spin_window,
            follow,
            reason,
        }
    }

    /// "spin+follow", "spin", "follow" or "off": the mode in one word, for `shoal stats`.
    pub fn mode(&self) -> &'static str {
        match (!self.spin_window.is_zero(), self.follow) {
            (true, true) => "spin+follow",
            (true, false) => "spin",
            (false, true) => "follow",
            (false, false) => "off",
        }
    }
}

impl fmt::Display for BusyWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "busy-wait {}: {}", self.mode(), self.reason)
    }
}

/// What the machine says about waking an idle CPU.
#[derive(Clone, Debug, PartialEq)]
enum IdleExit {
    /// One CPU allowed: nowhere to spin or follow from.
    OneCpu,
    /// The cpuidle governor polls this long before halting (haltpoll's guest_halt_poll_ns).
    Polls { governor: String, poll: Duration },
    /// The haltpoll governor polls less than `ENOUGH_IDLE_POLL`: an idle vCPU halts, and
    /// waking it costs a VM exit.
    Halts { governor: String, poll: Duration },
    /// Every enabled idle state polls (`idle=poll`, deeper states disabled).
    OnlyPolling,
    /// The lower quartile of `WAKE_ROUNDS` cross-CPU futex wake-ups after `WAKE_IDLE_GAP`
    /// idle, the least over `sleeper_cpus`.
    Measured { governor: String, wake: Duration },
}

impl IdleExit {
    fn probe() -> Self {
        let cpus = online_cpus();
        let governor = read_trimmed(&format!("{CPUIDLE}/current_governor"))
            .unwrap_or_else(|| "none".to_string());
        let halt_poll = read_trimmed(HALTPOLL_POLL_NS)
            .and_then(|ns| ns.parse::<u64>().ok())
            .map(Duration::from_nanos);
        let states = idle_states();
        Self::judge(cpus.len(), &governor, halt_poll, &states, || {
            sleeper_cpus(&cpus)
                .map(|sleeper| measure_wake(cpus[0], sleeper))
                .min()
                .unwrap_or_default()
        })
    }

    /// The verdict from the machine's facts; `measure` runs only where they do not say.
    fn judge(
        cpus: usize,
        governor: &str,
        halt_poll: Option<Duration>,
        states: &[IdleState],
        measure: impl FnOnce() -> Duration,
    ) -> Self {
        if cpus < 2 {
            return IdleExit::OneCpu;
        }
        if let (Some(poll), "haltpoll") = (halt_poll, governor) {
            let governor = governor.to_string();
            return if poll >= ENOUGH_IDLE_POLL {
                IdleExit::Polls { governor, poll }
            } else {
                IdleExit::Halts { governor, poll }
            };
        }
        let enabled: Vec<&IdleState> = states.iter().filter(|state| state.enabled).collect();
        if !enabled.is_empty() && enabled.iter().all(|state| state.polls()) {
            return IdleExit::OnlyPolling;
        }
        IdleExit::Measured {
            governor: governor.to_string(),
            wake: measure(),
        }
    }

    /// Whether a caller waits long for an idle CPU to wake: busy-waiting then pays.
    fn slow(&self) -> bool {
        match self {
            IdleExit::OneCpu | IdleExit::Polls { .. } | IdleExit::OnlyPolling => false,
            IdleExit::Halts { .. } => true,
            IdleExit::Measured { wake, .. } => *wake >= SLOW_WAKE,
        }
    }
}

impl fmt::Display for IdleExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleExit::OneCpu => write!(f, "one CPU"),
            IdleExit::Polls { governor, poll } => write!(
                f,
                "idle CPUs poll {} µs before halting (cpuidle governor {governor})",
                poll.as_micros()
            ),
            IdleExit::Halts { governor, poll } => write!(
                f,
                "idle CPUs halt after {} µs of polling (cpuidle governor {governor}): slow to wake",
                poll.as_micros()
            ),
            IdleExit::OnlyPolling => write!(f, "idle CPUs only poll (no halting idle state)"),
            IdleExit::Measured { governor, wake } => write!(
                f,
                "an idle CPU wakes in {:.1} µs ({} µs or more: slow; cpuidle governor {governor})",
                wake.as_nanos() as f64 / 1e3,
                SLOW_WAKE.as_micros()
            ),
        }
    }
}

/// One of cpu0's idle states (`cpuidle/stateN/`): the others are alike on the machines we
/// know, and reading one keeps the probe short.
#[derive(Clone, Debug, PartialEq)]
struct IdleState {
    name: String,
    enabled: bool,
}

impl IdleState {
    fn polls(&self) -> bool {
        self.name == "POLL"
    }
}

fn idle_states() -> Vec<IdleState> {
    let mut states = Vec::new();
    for index in 0.. {
        let dir = format!("{CPU0_IDLE_STATES}/state{index}");
        let Some(name) = read_trimmed(&format!("{dir}/name")) else {
            break;
        };
        let enabled = read_trimmed(&format!("{dir}/disable")).as_deref() != Some("1");
        states.push(IdleState { name, enabled });
    }
    states
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_string())
}

/// Where the wake-up is measured from the first CPU to: the second, the last and two
/// between (fewer where there are fewer CPUs). A machine busy at mount (a `mkfs` just run,
/// write-back) keeps some CPUs busy, rarely all of them.
fn sleeper_cpus(cpus: &[usize]) -> impl Iterator<Item = usize> + '_ {
    let n = cpus.len();
    let mut picks = vec![1, n / 2, 3 * n / 4, n - 1];
    picks.retain(|&index| index >= 1 && index < n);
    picks.sort_unstable();
    picks.dedup();
    picks.into_iter().map(move |index| cpus[index])
}

/// The lower quartile of the times from a futex wake-up (unpark) on `waker_cpu` until the
/// woken thread runs on `sleeper_cpu`, which was idle for `WAKE_IDLE_GAP` before.
fn measure_wake(waker_cpu: usize, sleeper_cpu: usize) -> Duration {
    let epoch = Instant::now();
    let armed = Arc::new(AtomicBool::new(false));
    let woke_ns = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let (armed, woke_ns, stop) = (armed.clone(), woke_ns.clone(), stop.clone());
        thread::Builder::new()
            .name("shoal-wake-probe".into())
            .spawn(move || {
                pin_to_cpu(sleeper_cpu);
                while !stop.load(Ordering::Acquire) {
                    thread::park();
                    if armed.swap(false, Ordering::AcqRel) {
                        woke_ns.store(nanos_since(epoch), Ordering::Release);
                    }
                }
            })
    };
    let Ok(sleeper) = sleeper else {
        return Duration::ZERO;
    };
    let samples = thread::scope(|scope| {
        let waker = scope.spawn(|| {
            pin_to_cpu(waker_cpu);
            (0..WAKE_ROUNDS)
                .map(|_| one_wake(epoch, &armed, &woke_ns, sleeper.thread()))
                .collect::<Vec<Duration>>()
        });
        waker.join().unwrap_or_default()
    });
    stop.store(true, Ordering::Release);
    sleeper.thread().unpark();
    let _ = sleeper.join();
    lower_quartile(samples)
}

fn one_wake(
    epoch: Instant,
    armed: &AtomicBool,
    woke_ns: &AtomicU64,
    sleeper: &thread::Thread,
) -> Duration {
    thread::sleep(WAKE_IDLE_GAP);
    woke_ns.store(0, Ordering::Release);
    armed.store(true, Ordering::Release);
    let sent_ns = nanos_since(epoch);
    sleeper.unpark();
    let give_up = Instant::now() + WAKE_GIVE_UP;
    loop {
        let woke = woke_ns.load(Ordering::Acquire);
        if woke != 0 {
            return Duration::from_nanos(woke.saturating_sub(sent_ns));
        }
        if Instant::now() >= give_up {
            armed.store(false, Ordering::Release);
            return WAKE_GIVE_UP;
        }
        std::hint::spin_loop();
    }
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn lower_quartile(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 4).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, enabled: bool) -> IdleState {
        IdleState {
            name: name.to_string(),
            enabled,
        }
    }

    fn never_measured() -> Duration {
        panic!("measured although the machine said enough")
    }

    #[test]
    fn idle_polling_machines_do_not_busy_wait() {
        let haltpoll = [state("POLL", true), state("haltpoll idle", true)];
        // The 16-core guest of issue 32: haltpoll polling 200 µs.
        let polls = IdleExit::judge(
            16,
            "haltpoll",
            Some(Duration::from_micros(200)),
            &haltpoll,
            never_measured,
        );
        assert!(!polls.slow(), "{polls}");
        assert!(polls.to_string().contains("poll 200 µs"), "{polls}");
        let only_polling = [state("POLL", true), state("C1", false)];
        let idle_poll = IdleExit::judge(4, "menu", None, &only_polling, never_measured);
        assert_eq!(idle_poll, IdleExit::OnlyPolling);
        assert_eq!(
            IdleExit::judge(1, "menu", None, &[], never_measured),
            IdleExit::OneCpu
        );
    }

    #[test]
    fn halting_machines_busy_wait_and_others_are_measured() {
        // The 2-core development VM: haltpoll that never polls.
        let haltpoll = [state("POLL", true), state("haltpoll idle", true)];
        let halts = IdleExit::judge(
            2,
            "haltpoll",
            Some(Duration::ZERO),
            &haltpoll,
            never_measured,
        );
        assert!(halts.slow(), "{halts}");
        let states = [state("POLL", true), state("C1", true), state("C6", true)];
        let slow = IdleExit::judge(8, "menu", None, &states, || Duration::from_micros(20));
        assert!(slow.slow(), "{slow}");
        let fast = IdleExit::judge(8, "menu", None, &states, || Duration::from_micros(3));
        assert!(!fast.slow(), "{fast}");
        assert!(fast.to_string().contains("wakes in 3.0 µs"), "{fast}");
    }

    #[test]
    fn options_override_the_machine() {
        let slow = IdleExit::Measured {
            governor: "haltpoll".into(),
            wake: Duration::from_micros(20),
        };
        let chosen = BusyWait::from_parts(BusyWaitAsked::default(), Some(&slow));
        assert_eq!((chosen.spin_window, chosen.follow), (SPIN_WINDOW, true));
        assert_eq!(chosen.mode(), "spin+follow");
        let asked = BusyWaitAsked {
            spin_window: Some(Duration::ZERO),
            follow: None,
        };
        let chosen = BusyWait::from_parts(asked, Some(&slow));
        assert_eq!(chosen.mode(), "follow");
        assert!(chosen
            .reason
            .starts_with("spin= given; otherwise: an idle CPU wakes in 20.0 µs"));
        let fast = IdleExit::OnlyPolling;
        let asked = BusyWaitAsked {
            spin_window: Some(Duration::from_micros(500)),
            follow: Some(true),
        };
        let chosen = BusyWait::from_parts(asked, None);
        assert_eq!(chosen.spin_window, Duration::from_micros(500));
        assert_eq!(
            chosen.to_string(),
            "busy-wait spin+follow: spin= and follow= given"
        );
        let chosen = BusyWait::from_parts(BusyWaitAsked::default(), Some(&fast));
        assert_eq!(chosen.mode(), "off");
    }

    #[test]
    fn a_wake_up_is_measured_between_two_cpus() {
        let cpus = online_cpus();
        if cpus.len() < 2 {
            return;
        }
        let wake = measure_wake(cpus[0], cpus[1]);
        assert!(wake > Duration::ZERO && wake <= WAKE_GIVE_UP, "{wake:?}");
    }

    #[test]
    fn wake_ups_are_measured_to_up_to_four_cpus() {
        let sleepers = |n: usize| sleeper_cpus(&(0..n).collect::<Vec<_>>()).collect::<Vec<_>>();
        assert_eq!(sleepers(2), vec![1]);
        assert_eq!(sleepers(3), vec![1, 2]);
        assert_eq!(sleepers(4), vec![1, 2, 3]);
        assert_eq!(sleepers(16), vec![1, 8, 12, 15]);
        let listed = [3, 5, 7, 9, 11];
        let picked: Vec<usize> = sleeper_cpus(&listed).collect();
        assert_eq!(
            picked,
            vec![5, 7, 9, 11],
            "CPUs as the process may use them"
        );
    }

    #[test]
    fn wake_ups_lengthened_by_other_work_do_not_count() {
        // A guest that wakes in 6 µs, measured while other work delayed half the rounds.
        let mut samples: Vec<Duration> = (0..16).map(|_| Duration::from_micros(6)).collect();
        samples.extend((0..16).map(|round| Duration::from_micros(14 + round)));
        assert_eq!(lower_quartile(samples), Duration::from_micros(6));
        let slow: Vec<Duration> = (0..32)
            .map(|round| Duration::from_micros(15 + round))
            .collect();
        assert!(
            lower_quartile(slow) >= SLOW_WAKE,
            "a VM whose halted CPUs wake slowly"
        );
        assert_eq!(lower_quartile(Vec::new()), Duration::ZERO);
    }
}
