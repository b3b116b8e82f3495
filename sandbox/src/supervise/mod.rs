//! Process supervision, the one part of hunkgate that allows `unsafe`: command templates and
//! agent processes — process groups, the PID-namespace init, the lifeline, timeouts and
//! cancellation ([`agent`]); what every agent's PID-namespace init is made of, in both isolation
//! modes ([`init`]); the agent's `PATH` under user isolation ([`agent_path`]); the
//! watchdog ([`watchdog`]); what one read-back may bring in ([`limits`]); the agent's process
//! tree under user isolation, as the helper runs it, with its PID-namespace init ([`tree`]);
//! what a child of the hub does between fork and exec ([`launch`]); the processes `/proc`
//! shows ([`procs`]); and the few system calls
//! no dependency wraps safely, each behind a safe function ([`os`]). Every `unsafe` block says
//! why it is sound.

pub mod agent;
pub mod agent_path;
pub mod init;
pub mod launch;
pub mod limits;
pub mod os;
pub mod procs;
pub mod tree;
pub mod watchdog;
