/* The tokenizer commands of the zoffload CLI (engine/cli/tokenizer_cli.c), called
 * by engine/cli/main.c: argv[0] is the subcommand's name. They return the
 * process exit code (0, 1 failure, 2 usage) and print their own errors. */
#ifndef ZO_TOKENIZER_CLI_H
#define ZO_TOKENIZER_CLI_H

/* zoffload tokenizer train|encode|decode ... */
int zo_cli_tokenizer(int argc, char **argv);
/* zoffload bench tokenize ... */
int zo_cli_bench_tokenize(int argc, char **argv);

extern const char *const zo_cli_tokenizer_usage;
extern const char *const zo_cli_bench_tokenize_usage;

#endif /* ZO_TOKENIZER_CLI_H */
