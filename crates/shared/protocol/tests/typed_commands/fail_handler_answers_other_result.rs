use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::worker::AgentSessionStopParams;
use gatehouse_protocol::worker::AgentTurnResult;

struct Stop;

impl Serve<AgentSessionStop, ()> for Stop {
    fn serve(&self, _params: AgentSessionStopParams, _context: ()) -> Served<AgentTurnResult> {
        Box::pin(async move {
            Ok(AgentTurnResult {
                reply: String::new(),
                usage: None,
            })
        })
    }
}

fn main() {}
