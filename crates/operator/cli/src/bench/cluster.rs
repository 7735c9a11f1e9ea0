//! `gatehouse bench cluster`: Gateway replicas on one PostgreSQL database, with one or two node
//! hosts, all in this process and linked over real loopback WebSockets, with the in-process mock
//! model in real worker processes.
//!
//! For 1 and 3 replicas and 1 and 2 node hosts, it measures message admission (many clients
//! posting at once, each message to the next replica) and text turns (`/say hi`, POST to
//! `turn.completed`, many clients at once), each against the single-replica figure of the same
//! run: 3 replicas against 1 replica with as many node hosts, 1 replica with 2 node hosts
//! against 1 replica with 1. Each configuration uses sessions of its own in the same database.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_api::sessions::MessageParams;
use gatehouse_api::sessions::TurnQuery;
use gatehouse_gateway::RunningGateway;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::NodeHost;
use gatehouse_harness::host::NodeHostConfig;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::model_spec::ModelSpec;
use gatehouse_store::location::StoreLocation;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;
use crate::bench::turn::BENCH_TOKEN;
use crate::exit::UsageError;

/// Arguments of `gatehouse bench cluster`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClusterArgs {
    /// The PostgreSQL database the replicas share (`postgres://...`): an empty database used
    /// only for benchmarks, since the Gateway's tables are created in it and keep the
    /// benchmark's sessions.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Clients posting at once.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Messages each client posts for the admission figures.
    #[arg(long, default_value_t = 10)]
    messages_per_client: usize,
    /// `/say hi` turns each client runs one after another for the turn figures.
    #[arg(long, default_value_t = 3)]
    turns_per_client: usize,
}

/// The configurations measured, (replicas, node hosts); the first is the baseline.
const CONFIGURATIONS: [(usize, usize); 4] = [(1, 1), (3, 1), (1, 2), (3, 2)];

/// Runs the benchmark.
pub(crate) fn run(args: &ClusterArgs) -> anyhow::Result<Report> {
    let store = match args.store.parse::<StoreLocation>() {
        Ok(location @ StoreLocation::Remote(_)) => location,
        Ok(StoreLocation::Local(_)) => {
            return Err(UsageError::new(
                "--store takes a postgres:// URL: replicas share a PostgreSQL database",
            )
            .into());
        }
        Err(error) => return Err(UsageError::new(error.to_string()).into()),
    };
    anyhow::ensure!(args.clients > 0, "--clients must be at least 1");
    crate::signals::runtime()?.block_on(measure(args, store))
}

/// What one configuration measured.
struct Measured {
    replicas: usize,
    nodes: usize,
    admit: Vec<Duration>,
    admitted_per_second: f64,
    turns: Vec<Duration>,
}

impl Measured {
    /// Returns `N replica(s), M node(s)`.
    fn shape(&self) -> String {
        format!(
            "{} replica{}, {} node{}",
            self.replicas,
            plural(self.replicas),
            self.nodes,
            plural(self.nodes)
        )
    }
}

/// Returns the single-replica figure `run` is compared with: 1 replica with as many node hosts
/// for several replicas, else 1 replica with 1 node host (the first configuration).
fn baseline_of<'a>(measured: &'a [Measured], run: &Measured) -> &'a Measured {
    measured
        .iter()
        .find(|baseline| run.replicas > 1 && baseline.replicas == 1 && baseline.nodes == run.nodes)
        .unwrap_or(&measured[0])
}

async fn measure(args: &ClusterArgs, store: StoreLocation) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let mut measured = Vec::new();
    for (index, (replicas, nodes)) in CONFIGURATIONS.into_iter().enumerate() {
        let run = Configuration {
            name: format!("c{index}-{replicas}r{nodes}n-{}", std::process::id()),
            dir: base.join(format!("c{index}")),
            media: base.join("media"),
            store: store.clone(),
            replicas,
            nodes,
        };
        measured.push(run.measure(args).await?);
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for run in &measured {
        let baseline = baseline_of(&measured, run);
        let (shape, baseline_shape) = (run.shape(), baseline.shape());
        for (measure, baseline_samples, candidate_samples) in [
            ("admit", &baseline.admit, &run.admit),
            ("/say hi turn", &baseline.turns, &run.turns),
        ] {
            rows.push(Row {
                case: format!("{measure}, {shape}"),
                baseline_name: format!("{measure}, {baseline_shape}"),
                baseline: Stats::from_samples(&mut baseline_samples.clone()),
                candidate: Stats::from_samples(&mut candidate_samples.clone()),
                target: String::from("informational"),
            });
        }
        notes.push(format!(
            "{shape}: {:.0} messages/s admitted by {} clients ({:.2}x the {:.0} of {baseline_shape})",
            run.admitted_per_second,
            args.clients,
            run.admitted_per_second / baseline.admitted_per_second,
            baseline.admitted_per_second
        ));
    }
    notes.push(format!(
        "every replica, node host and the mock model share this process and {} cores; worker processes are real; each client's messages go to the replicas in turn",
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
    ));
    Ok(Report {
        title: format!(
            "gatehouse bench cluster: Gateway replicas on one PostgreSQL, {} clients, vs 1 replica",
            args.clients
        ),
        rows,
        notes,
    })
}

fn plural(count: usize) -> &'static str {
    match count {
        1 => "",
        _ => "s",
    }
}

/// One configuration: its replicas and node hosts, on sessions of its own.
struct Configuration {
    name: String,
    dir: std::path::PathBuf,
    media: std::path::PathBuf,
    store: StoreLocation,
    replicas: usize,
    nodes: usize,
}

impl Configuration {
    async fn measure(&self, args: &ClusterArgs) -> anyhow::Result<Measured> {
        let mut gateways = Vec::new();
        for index in 0..self.replicas {
            gateways.push(self.start_replica(index).await?);
        }
        let clients: Vec<Client> = gateways
            .iter()
            .map(|gateway| Client::new(&format!("http://{}", gateway.local_addr), BENCH_TOKEN))
            .collect();
        let shutdown = CancellationToken::new();
        let mut hosts = Vec::new();
        for index in 0..self.nodes {
            hosts.push(
                self.start_node(index, &gateways, args, shutdown.clone())
                    .await?,
            );
        }
        let measured = self.drive(args, &clients).await;
        shutdown.cancel();
        for host in hosts {
            let _ = host.await;
        }
        for gateway in gateways {
            gateway.shutdown.cancel();
            let _ = gateway.wait().await;
        }
        measured
    }

    async fn start_replica(&self, index: usize) -> anyhow::Result<RunningGateway> {
        let mut config = crate::bench::gateway_config(self.dir.join(format!("replica-{index}")))?;
        config.store = Some(self.store.clone());
        config.media = Some(gatehouse_media::MediaLocation::Local(self.media.clone()));
        config.replica.replica_id = Some(format!("{}-r{index}", self.name));
        crate::embedded::start_gateway(config).await
    }

    /// Starts node host `index`, enrolled through replica `index % replicas`, knowing every
    /// replica's URL (that one first), with a worker slot for every client.
    async fn start_node(
        &self,
        index: usize,
        gateways: &[RunningGateway],
        args: &ClusterArgs,
        shutdown: CancellationToken,
    ) -> anyhow::Result<tokio::task::JoinHandle<gatehouse_harness::Result<()>>> {
        let root = self.dir.join(format!("node-{index}"));
        let first = index % gateways.len();
        let setup_code_file = crate::embedded::enrollment_code(&gateways[first], &root).await?;
        let gateway_urls = (0..gateways.len())
            .map(|offset| {
                let gateway = &gateways[(first + offset) % gateways.len()];
                format!("ws://{}/node", gateway.local_addr)
            })
            .collect();
        let workers = crate::bench::mock_workers(args.clients + 8)?;
        let host = NodeHost::prepare_with(
            NodeHostConfig {
                root,
                gateway_urls,
                setup_code_file,
                runtime: Runtime::Native,
                display_name: Some(format!("bench node {index}")),
                home: None,
            },
            RuntimeConfig {
                model: ModelSpec::Mock,
                scratch: None,
                workers: Some(workers),
                codex: None,
            },
        )?;
        Ok(tokio::spawn(async move { host.run(shutdown).await }))
    }

    /// Waits for the node hosts, then measures admission and turns.
    async fn drive(&self, args: &ClusterArgs, clients: &[Client]) -> anyhow::Result<Measured> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listed = clients[0].nodes().await?;
            if listed.nodes.iter().filter(|node| node.connected).count() == self.nodes {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the node hosts did not connect within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let clients = Arc::new(clients.to_vec());
        let started = Instant::now();
        let admitted = fan_out(args.clients, |client| {
            let clients = Arc::clone(&clients);
            let session = format!("{}-admit-{client}", self.name);
            let messages = args.messages_per_client;
            async move {
                let mut latencies = Vec::with_capacity(messages);
                let mut turns = Vec::with_capacity(messages);
                for message in 0..messages {
                    let via = &clients[(client + message) % clients.len()];
                    let posted = Instant::now();
                    let accepted = via
                        .post_message(&session, &say(&format!("m{message}")))
                        .await?;
                    latencies.push(posted.elapsed());
                    turns.push(accepted.turn_id);
                }
                Ok((latencies, turns))
            }
        })
        .await?;
        let total = (args.clients * args.messages_per_client) as f64;
        let admitted_per_second = total / started.elapsed().as_secs_f64().max(1e-6);
        let (admit, turns): (Vec<Vec<Duration>>, Vec<Vec<String>>) = admitted.into_iter().unzip();
        // The admitted turns run to their end before the turn figures are taken.
        for turn_id in turns.iter().flatten() {
            wait_end(&clients[0], turn_id).await?;
        }
        let timed = fan_out(args.clients, |client| {
            let via = clients[client % clients.len()].clone();
            let session = format!("{}-turn-{client}", self.name);
            let turns = args.turns_per_client;
            async move {
                let mut latencies = Vec::with_capacity(turns);
                for _ in 0..turns {
                    latencies.push(crate::bench::turn::turn(&via, &session, "/say hi").await?);
                }
                Ok(latencies)
            }
        })
        .await?;
        Ok(Measured {
            replicas: self.replicas,
            nodes: self.nodes,
            admit: admit.concat(),
            admitted_per_second,
            turns: timed.concat(),
        })
    }
}

/// Runs `work(client)` for every client at once and returns what each returned.
async fn fan_out<T, F, Fut>(clients: usize, work: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let tasks: Vec<_> = (0..clients)
        .map(|client| tokio::spawn(work(client)))
        .collect();
    let mut results = Vec::with_capacity(clients);
    for task in tasks {
        results.push(task.await??);
    }
    Ok(results)
}

fn say(text: &str) -> MessageParams {
    MessageParams {
        text: format!("/say {text}"),
        attachments: Vec::new(),
        idempotency_key: None,
        queue_mode: None,
    }
}

/// Waits until the turn `turn_id` has ended (completed, or failed, which the bench reports).
async fn wait_end(client: &Client, turn_id: &str) -> anyhow::Result<()> {
    let wait = TurnQuery { wait: Some(30) };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let turn = client.turn(turn_id, &wait).await?;
        if turn.status.is_terminal() {
            anyhow::ensure!(
                turn.status == gatehouse_api::sessions::TurnStatus::Completed,
                "an admitted turn did not complete: {}",
                serde_json::to_string(&turn).unwrap_or_default()
            );
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "a turn did not end within 300 s");
    }
}
