mod fake_gateway;
mod file_commands;
mod gateway_policy;
mod reconnect;
mod startup;
mod status;
mod websocket;
