use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::command::decode_result;
use gatehouse_protocol::command::encode_params;
use gatehouse_protocol::worker::AgentSessionStopParams;
use gatehouse_protocol::worker::AgentSessionStopResult;

struct Stop;

impl Serve<AgentSessionStop, ()> for Stop {
    fn serve(
        &self,
        params: AgentSessionStopParams,
        _context: (),
    ) -> Served<AgentSessionStopResult> {
        Box::pin(async move {
            Ok(AgentSessionStopResult {
                stopped: !params.session_key.is_empty(),
                discarded: params.discard,
            })
        })
    }
}

fn main() {
    let params = AgentSessionStopParams {
        session_key: String::from("s"),
        discard: false,
    };
    let _text = encode_params::<AgentSessionStop>(&params);
    let _result: Result<AgentSessionStopResult, _> =
        decode_result::<AgentSessionStop>(serde_json::json!({"stopped": true}));
    let _handler: &dyn Serve<AgentSessionStop, ()> = &Stop;
}
