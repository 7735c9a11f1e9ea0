use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::decode_result;
use gatehouse_protocol::commands::FileStatResult;

fn main() {
    let _result: Result<FileStatResult, serde_json::Error> =
        decode_result::<AgentSessionStop>(serde_json::json!({"stopped": true}));
}
