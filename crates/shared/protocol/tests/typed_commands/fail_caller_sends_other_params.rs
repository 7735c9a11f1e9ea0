use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::encode_params;
use gatehouse_protocol::commands::FileStatParams;

fn main() {
    let params = FileStatParams::default();
    let _text = encode_params::<AgentSessionStop>(&params);
}
