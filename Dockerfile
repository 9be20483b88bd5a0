# KafkaIQ broker image: built with the Rust toolchain, run on Debian slim.
#   docker build -t kafkaiq .
#   docker run -p 127.0.0.1:9092:9092 kafkaiq
# The default command listens on all container interfaces and advertises the compose service
# name `kafkaiq`; override the command to advertise another address.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin kafkaiq

FROM debian:bookworm-slim
COPY --from=build /src/target/release/kafkaiq /usr/local/bin/kafkaiq
RUN mkdir -p /var/lib/kafkaiq
WORKDIR /var/lib/kafkaiq
VOLUME /var/lib/kafkaiq
EXPOSE 9092
ENTRYPOINT ["kafkaiq"]
CMD ["--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
     "--override", "advertised.listeners=PLAINTEXT://kafkaiq:9092", \
     "--override", "log.dirs=/var/lib/kafkaiq/data"]
