use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::commands::FileStatParams;
use gatehouse_protocol::worker::AgentSessionStopResult;

struct Stop;

impl Serve<AgentSessionStop, ()> for Stop {
    fn serve(&self, _params: FileStatParams, _context: ()) -> Served<AgentSessionStopResult> {
        Box::pin(async move { Ok(AgentSessionStopResult::default()) })
    }
}

fn main() {}
